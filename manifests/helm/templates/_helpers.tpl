{{/* Chart name, possibly overridden. */}}
{{- define "rbo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of object names. */}}
{{- define "rbo.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "rbo.controllerName" -}}{{ include "rbo.fullname" . | trunc 52 | trimSuffix "-" }}-controller{{- end -}}
{{- define "rbo.webhookName" -}}{{ include "rbo.fullname" . | trunc 55 | trimSuffix "-" }}-webhook{{- end -}}
{{- define "rbo.webhookTlsSecret" -}}
{{- if eq .Values.webhook.certificate.mode "existing-secret" -}}
{{- required "webhook.certificate.existingSecret is required with mode existing-secret" .Values.webhook.certificate.existingSecret -}}
{{- else -}}
{{- include "rbo.webhookName" . }}-tls
{{- end -}}
{{- end -}}

{{- define "rbo.controllerServiceAccount" -}}{{ required "controller.serviceAccount.name is required" .Values.controller.serviceAccount.name }}{{- end -}}
{{- define "rbo.webhookServiceAccount" -}}{{ default (include "rbo.webhookName" .) .Values.webhook.serviceAccount.name }}{{- end -}}

{{/* Labels of every object. */}}
{{- define "rbo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/part-of: resource-booking-operator
app.kubernetes.io/name: {{ include "rbo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "controller"). */}}
{{- define "rbo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rbo.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Image reference of one component's image values. */}}
{{- define "rbo.image" -}}
{{- $tag := default .ctx.Chart.AppVersion .image.tag -}}
{{- if eq (toString $tag) "latest" -}}{{- fail "image tag latest is not allowed: pin a version or a digest" -}}{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (toString $tag) -}}
{{- end -}}
{{- end -}}

{{/* Pod and container security settings shared by both Deployments (restricted PSS). */}}
{{- define "rbo.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- define "rbo.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}


{{- /* What cert-manager's CA injector reads the webhook configurations' caBundle from: the chart's
CA certificate, or the serving certificate when the issuer is your own. */ -}}
{{- define "rbo.webhookCaFrom" -}}
{{- if .Values.webhook.certificate.certManager.issuerRef -}}
{{ .Release.Namespace }}/{{ include "rbo.webhookName" . }}
{{- else -}}
{{ .Release.Namespace }}/{{ include "rbo.webhookName" . }}-ca
{{- end -}}
{{- end -}}
