#!/usr/bin/env bash
# `make krew-archive`: the release archive of kubectl-booking for one platform, and the krew
# manifest for the archives built so far.
#
#   controller/plugin/krew/archive.sh --bin PATH --version vX.Y.Z --os linux --arch amd64 \
#     --manifest controller/plugin/krew/booking.yaml --uri-base URL --out-dir target/krew
#
# Writes OUT/kubectl-booking_<version>_<os>_<arch>.tar.gz (kubectl-booking, LICENSE, README.md
# at its top level, as the manifest's `bin` names it) and OUT/booking.yaml: the manifest with, for
# every platform whose archive is in OUT, `sha256` of that archive and `uri` URL/<archive>;
# platforms without an archive are left out, so that what is written installs as it is.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
die() { echo "make krew-archive: $*" >&2; exit 2; }

bin="" version="" os="" arch="" manifest="" uri_base="" out_dir=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) bin=${2:?--bin needs a value}; shift 2 ;;
    --version) version=${2:?--version needs a value}; shift 2 ;;
    --os) os=${2:?--os needs a value}; shift 2 ;;
    --arch) arch=${2:?--arch needs a value}; shift 2 ;;
    --manifest) manifest=${2:?--manifest needs a value}; shift 2 ;;
    --uri-base) uri_base=${2:?--uri-base needs a value}; shift 2 ;;
    --out-dir) out_dir=${2:?--out-dir needs a value}; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
for v in bin version os arch manifest uri_base out_dir; do
  [[ -n "${!v}" ]] || die "--${v//_/-} is required"
done
[[ -x "$bin" ]] || die "$bin is not an executable kubectl-booking (set ARCHIVE_BIN, or let make build it)"
[[ -f "$manifest" ]] || die "no manifest $manifest"
grep -qx "  version: $version" "$manifest" \
  || die "$manifest has not spec.version $version (the workspace's version): update it"
grep -q "matchLabels: {os: $os, arch: $arch}" "$manifest" \
  || die "$manifest has no platform os=$os arch=$arch: add one"

mkdir -p "$out_dir"
name="kubectl-booking_${version}_${os}_${arch}"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -m 0755 "$bin" "$stage/kubectl-booking"
install -m 0644 "$repo_root/LICENSE" "$repo_root/README.md" "$stage/"
# Reproducible: fixed order, owner and times.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
  -C "$stage" -czf "$out_dir/$name.tar.gz.tmp" kubectl-booking LICENSE README.md
mv "$out_dir/$name.tar.gz.tmp" "$out_dir/$name.tar.gz"
echo "wrote $out_dir/$name.tar.gz"

# The manifest: each platform block (from "- selector:" to its "bin:") kept with its archive's
# sha256 and uri, or dropped when its archive was not built.
python3 - "$manifest" "$out_dir" "$version" "$uri_base" >"$out_dir/booking.yaml.tmp" <<'PY'
import hashlib, os, re, sys
manifest, out_dir, version, uri_base = sys.argv[1:5]
lines = open(manifest).read().splitlines()
out, block, kept = [], None, 0
def flush(block):
    global kept
    text = "\n".join(block)
    m = re.search(r"matchLabels: \{os: (\w+), arch: (\w+)\}", text)
    if not m:
        sys.exit(f"{manifest}: a platform without 'matchLabels: {{os: …, arch: …}}'")
    archive = f"kubectl-booking_{version}_{m[1]}_{m[2]}.tar.gz"
    path = os.path.join(out_dir, archive)
    if not os.path.exists(path):
        return []
    kept += 1
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    text = re.sub(r"(?m)^(\s*)uri: .*$", rf"\g<1>uri: {uri_base}/{archive}", text)
    text = re.sub(r"(?m)^(\s*)sha256: .*$", rf"\g<1>sha256: {digest}", text)
    return text.splitlines()
for line in lines:
    if re.match(r"^\s*- selector:", line):
        if block is not None:
            out += flush(block)
        block = [line]
    elif block is not None:
        block.append(line)
        if re.match(r"^\s*bin:", line):
            out += flush(block)
            block = None
    else:
        out.append(line)
if block is not None:
    out += flush(block)
if not kept:
    sys.exit("no platform of the manifest has an archive")
print("\n".join(out))
PY
mv "$out_dir/booking.yaml.tmp" "$out_dir/booking.yaml"
echo "wrote $out_dir/booking.yaml"
echo "install it with: kubectl krew install --manifest=$out_dir/booking.yaml --archive=$out_dir/$name.tar.gz"
