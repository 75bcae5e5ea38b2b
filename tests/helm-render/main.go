// Command helm-render renders a Helm chart the way `helm template` does, without Helm: Go's
// text/template with sprig's function map (Helm's template engine is exactly this) plus the
// functions Helm adds (include, tpl, required, toYaml, fromYaml, toJson, fromJson, lookup),
// the built-in objects (.Values, .Release, .Chart, .Capabilities, .Template) and Helm's values
// semantics (values.yaml, then -f files, then --set; null deletes a key; numbers from YAML are
// float64 as in Helm, --set integers are int64).
//
// It exists so that the project's tests can render its chart on machines without a helm binary;
// it is not a general Helm replacement (no subcharts, no hooks ordering, no schema validation).
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go run ./tests/helm-render \
//	  [--release-name N] [--namespace NS] [-f values.yaml]... [--set a.b=c]... \
//	  [--set-string a.b=c]... [--api-versions group/version]... [--include-crds] [--notes] CHART
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	yaml "gopkg.in/yaml.v2"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// chartMeta holds the Chart.yaml fields templates use, under Helm's field names.
type chartMeta struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	AppVersion  string `json:"appVersion"`
	Description string `json:"description"`
	Type        string `json:"type"`
	KubeVersion string `json:"kubeVersion"`
	APIVersion  string `json:"apiVersion"`
}

// versionSet is .Capabilities.APIVersions.
type versionSet []string

// Has reports whether a "group/version" or "group/version/Kind" is available.
func (v versionSet) Has(s string) bool {
	for _, x := range v {
		if x == s {
			return true
		}
	}
	return false
}

type kubeVersion struct {
	Version    string
	Major      string
	Minor      string
	GitVersion string
}

func (k kubeVersion) String() string { return k.Version }

type capabilities struct {
	KubeVersion kubeVersion
	APIVersions versionSet
	HelmVersion map[string]string
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "helm-render:", err)
		os.Exit(1)
	}
}

func run() error {
	var valueFiles, sets, setStrings, apiVersions multiFlag
	releaseName := flag.String("release-name", "release-name", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	includeCRDs := flag.Bool("include-crds", false, "print the chart's crds/ files too")
	notes := flag.Bool("notes", false, "print the rendered NOTES.txt instead of the manifests")
	flag.Var(&valueFiles, "f", "values file (repeatable, later wins)")
	flag.Var(&sets, "set", "a.b=c[,d=e] (repeatable)")
	flag.Var(&setStrings, "set-string", "a.b=c, values kept as strings (repeatable)")
	flag.Var(&apiVersions, "api-versions", "extra group/version for .Capabilities.APIVersions (repeatable)")
	flag.Parse()
	if flag.NArg() != 1 {
		return errors.New("usage: helm-render [flags] CHART_DIR")
	}
	chartDir := flag.Arg(0)

	var meta chartMeta
	if err := readYAMLInto(filepath.Join(chartDir, "Chart.yaml"), &meta); err != nil {
		return err
	}
	if meta.Name == "" || meta.Version == "" {
		return errors.New("Chart.yaml needs name and version")
	}

	values := map[string]interface{}{}
	if err := readYAMLInto(filepath.Join(chartDir, "values.yaml"), &values); err != nil && !os.IsNotExist(errors.Unwrap(err)) {
		return err
	}
	for _, f := range valueFiles {
		over := map[string]interface{}{}
		if err := readYAMLInto(f, &over); err != nil {
			return err
		}
		values = coalesce(values, over)
	}
	for _, s := range sets {
		if err := applySet(values, s, false); err != nil {
			return err
		}
	}
	for _, s := range setStrings {
		if err := applySet(values, s, true); err != nil {
			return err
		}
	}
	values = prune(values)

	caps := capabilities{
		KubeVersion: kubeVersion{Version: "v1.33.0", Major: "1", Minor: "33", GitVersion: "v1.33.0"},
		APIVersions: append(versionSet{
			"v1", "apps/v1", "policy/v1", "rbac.authorization.k8s.io/v1",
			"admissionregistration.k8s.io/v1", "apiextensions.k8s.io/v1", "coordination.k8s.io/v1",
			"events.k8s.io/v1",
		}, apiVersions...),
		HelmVersion: map[string]string{"version": "v3.16.0"},
	}
	top := map[string]interface{}{
		"Values": values,
		"Release": map[string]interface{}{
			"Name": *releaseName, "Namespace": *namespace, "Service": "Helm",
			"IsInstall": true, "IsUpgrade": false, "Revision": 1,
		},
		"Chart":        meta,
		"Capabilities": caps,
		"Files":        map[string]interface{}{},
	}

	files, err := templateFiles(chartDir)
	if err != nil {
		return err
	}
	t := template.New("gotpl")
	// As Helm in non-strict mode: a missing key is the zero value; "<no value>" is removed.
	t.Option("missingkey=zero")
	funcs := funcMap(t)
	t.Funcs(funcs)
	for _, f := range files {
		text, err := os.ReadFile(filepath.Join(chartDir, f))
		if err != nil {
			return err
		}
		name := path.Join(meta.Name, f)
		if _, err := t.New(name).Funcs(funcs).Parse(string(text)); err != nil {
			return fmt.Errorf("parse %s: %w", name, err)
		}
	}

	var out bytes.Buffer
	if *includeCRDs && !*notes {
		crds, _ := filepath.Glob(filepath.Join(chartDir, "crds", "*.yaml"))
		sort.Strings(crds)
		for _, c := range crds {
			text, err := os.ReadFile(c)
			if err != nil {
				return err
			}
			fmt.Fprintf(&out, "---\n# Source: %s/crds/%s\n%s\n", meta.Name, filepath.Base(c), strings.TrimSpace(string(text)))
		}
	}
	for _, f := range files {
		base := path.Base(f)
		isNotes := base == "NOTES.txt"
		if strings.HasPrefix(base, "_") || isNotes != *notes || !(isNotes || strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml") || strings.HasSuffix(base, ".tpl")) {
			continue
		}
		if strings.HasSuffix(base, ".tpl") {
			continue
		}
		name := path.Join(meta.Name, f)
		data := map[string]interface{}{}
		for k, v := range top {
			data[k] = v
		}
		data["Template"] = map[string]interface{}{"Name": name, "BasePath": path.Join(meta.Name, "templates")}
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, name, data); err != nil {
			return fmt.Errorf("render %s: %w", name, err)
		}
		rendered := strings.ReplaceAll(buf.String(), "<no value>", "")
		if *notes {
			out.WriteString(rendered)
			continue
		}
		if strings.TrimSpace(rendered) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", name, strings.TrimSpace(rendered))
	}
	_, err = os.Stdout.Write(out.Bytes())
	return err
}

// templateFiles lists templates/ recursively, relative to the chart, sorted.
func templateFiles(chartDir string) ([]string, error) {
	var files []string
	root := filepath.Join(chartDir, "templates")
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.IsDir() {
			rel, _ := filepath.Rel(chartDir, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// funcMap is sprig's text function map with Helm's additions and removals.
func funcMap(t *template.Template) template.FuncMap {
	f := sprig.TxtFuncMap()
	// Helm removes these for security.
	delete(f, "env")
	delete(f, "expandenv")
	includedNames := map[string]int{}
	f["include"] = func(name string, data interface{}) (string, error) {
		if includedNames[name] > 1000 {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		includedNames[name]++
		defer func() { includedNames[name]-- }()
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		clone, err := t.Clone()
		if err != nil {
			return "", err
		}
		clone.Option("missingkey=zero")
		nt, err := clone.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		if err := nt.Execute(&buf, data); err != nil {
			return "", err
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	f["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return v, errors.New(msg)
		}
		return v, nil
	}
	f["toYaml"] = func(v interface{}) string {
		b, err := yaml.Marshal(jsonNormalise(v))
		if err != nil {
			return ""
		}
		return strings.TrimSuffix(string(b), "\n")
	}
	f["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
			return m
		}
		return jsonNormalise(m).(map[string]interface{})
	}
	f["fromYamlArray"] = func(s string) []interface{} {
		var a []interface{}
		if err := yaml.Unmarshal([]byte(s), &a); err != nil {
			return []interface{}{err.Error()}
		}
		return jsonNormalise(a).([]interface{})
	}
	f["toJson"] = func(v interface{}) string {
		b, err := json.Marshal(jsonNormalise(v))
		if err != nil {
			return ""
		}
		return string(b)
	}
	f["fromJson"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	// Like `helm template`: no cluster, so lookup finds nothing.
	f["lookup"] = func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	return f
}

// readYAMLInto parses a YAML file the way Helm does: YAML → JSON → Go values (numbers float64).
func readYAMLInto(file string, into interface{}) error {
	text, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read %s: %w", file, err)
	}
	var raw interface{}
	if err := yaml.Unmarshal(text, &raw); err != nil {
		return fmt.Errorf("parse %s: %w", file, err)
	}
	if raw == nil {
		return nil
	}
	b, err := json.Marshal(jsonNormalise(raw))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// jsonNormalise turns yaml.v2's map[interface{}]interface{} into map[string]interface{}.
func jsonNormalise(v interface{}) interface{} {
	switch x := v.(type) {
	case map[interface{}]interface{}:
		m := make(map[string]interface{}, len(x))
		for k, v := range x {
			m[fmt.Sprint(k)] = jsonNormalise(v)
		}
		return m
	case map[string]interface{}:
		m := make(map[string]interface{}, len(x))
		for k, v := range x {
			m[k] = jsonNormalise(v)
		}
		return m
	case []interface{}:
		a := make([]interface{}, len(x))
		for i, v := range x {
			a[i] = jsonNormalise(v)
		}
		return a
	default:
		return v
	}
}

// coalesce merges over into base: maps merge deeply, anything else replaces; a null in over
// is kept (and later pruned) so that it deletes the key, as in Helm.
func coalesce(base, over map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(base))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		bm, bok := out[k].(map[string]interface{})
		om, ook := v.(map[string]interface{})
		if bok && ook {
			out[k] = coalesce(bm, om)
		} else {
			out[k] = v
		}
	}
	return out
}

// prune deletes keys whose value is null.
func prune(m map[string]interface{}) map[string]interface{} {
	for k, v := range m {
		switch x := v.(type) {
		case nil:
			delete(m, k)
		case map[string]interface{}:
			m[k] = prune(x)
		}
	}
	return m
}

// applySet applies one --set argument: comma-separated key=value pairs, dotted keys, `\,` and
// `\.` escapes; values typed as Helm's strvals does (int64, bool, null, else string).
func applySet(values map[string]interface{}, arg string, asString bool) error {
	for _, pair := range splitUnescaped(arg, ',') {
		kv := strings.SplitN(pair, "=", 2)
		if len(kv) != 2 || kv[0] == "" {
			return fmt.Errorf("--set %q: expected key=value", pair)
		}
		keys := splitUnescaped(kv[0], '.')
		var val interface{} = kv[1]
		if !asString {
			val = typedValue(kv[1])
		}
		m := values
		for i, k := range keys {
			if i == len(keys)-1 {
				m[k] = val
				break
			}
			next, ok := m[k].(map[string]interface{})
			if !ok {
				next = map[string]interface{}{}
				m[k] = next
			}
			m = next
		}
	}
	return nil
}

func typedValue(s string) interface{} {
	switch s {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if len(s) > 1 && s[0] == '0' {
		return s // Helm keeps leading-zero numbers as strings
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i
	}
	return s
}

func splitUnescaped(s string, sep rune) []string {
	var parts []string
	var cur strings.Builder
	escaped := false
	for _, r := range s {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\':
			escaped = true
		case r == sep:
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteRune(r)
		}
	}
	return append(parts, cur.String())
}
