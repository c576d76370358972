#!/usr/bin/env bash
# Checks the deployment files with the tools this machine has. What it
# cannot check (a container build, a cluster, Agones) it says so.
#
#   bash deploy/check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== static binary, built as the Dockerfile builds it"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/udpgate/udpgate/cmd/internal/version.override=v0.0.0-check" \
  -o "$tmp/udpgate-server" ./cmd/server
if ldd "$tmp/udpgate-server" >/dev/null 2>&1; then
  echo "FAIL: the server binary is dynamically linked"; exit 1
fi
"$tmp/udpgate-server" -version | grep -q "v0.0.0-check" || { echo "FAIL: -ldflags version override not applied"; exit 1; }
"$tmp/udpgate-server" -config deploy/server.toml -print-config >/dev/null
echo "ok: static, version stamped, deploy/server.toml loads"

echo "== systemd unit"
if command -v systemd-analyze >/dev/null; then
  sed "s|/usr/local/bin/udpgate-server|$tmp/udpgate-server|" deploy/systemd/udpgate.service >"$tmp/udpgate.service"
  out=$(systemd-analyze verify "$tmp/udpgate.service" 2>&1 || true)
  if [ -n "$out" ]; then echo "$out"; echo "FAIL: systemd-analyze verify"; exit 1; fi
  systemd-analyze security --offline=true "$tmp/udpgate.service" 2>/dev/null | tail -n 1
  echo "ok: systemd-analyze verify is silent"
else
  echo "skipped: no systemd-analyze"
fi

echo "== sysctl drop-in: every key exists on this kernel"
while IFS='=' read -r key _; do
  key=$(echo "$key" | tr -d ' ')
  case "$key" in ''|'#'*) continue ;; esac
  [ -e "/proc/sys/${key//.//}" ] || { echo "FAIL: no /proc/sys entry for $key"; exit 1; }
done <deploy/systemd/90-udpgate.conf
echo "ok"

echo "== YAML manifests"
if python3 -c 'import yaml' 2>/dev/null; then
  python3 - "$tmp" deploy/kubernetes/*.yaml deploy/agones/*.yaml <<'PY'
# Parse every document, check its kind and apiVersion, and run the server
# binary with each container's arguments and environment (and the
# ConfigMap's server.toml) and -print-config: the settings must load.
import os, subprocess, sys, yaml
tmp = sys.argv[1]
want = {"Deployment": "apps/v1", "Service": "v1", "ConfigMap": "v1",
        "GameServer": "agones.dev/v1", "Fleet": "agones.dev/v1"}

def containers(doc):
    spec = doc.get("spec", {})
    if doc["kind"] == "Fleet":
        spec = spec["template"]["spec"]
    return spec.get("template", {}).get("spec", {}).get("containers", [])

for path in sys.argv[2:]:
    for doc in yaml.safe_load_all(open(path)):
        kind, api = doc.get("kind"), doc.get("apiVersion")
        if want.get(kind) != api:
            sys.exit(f"FAIL: {path}: kind {kind} with apiVersion {api}")
        meta = doc.get("metadata", {})
        if not meta.get("name") and not meta.get("generateName"):
            sys.exit(f"FAIL: {path}: {kind} without a name")
        if kind == "ConfigMap":
            os.makedirs(f"{tmp}/etc/udpgate", exist_ok=True)
            with open(f"{tmp}/etc/udpgate/server.toml", "w") as f:
                f.write(doc["data"]["server.toml"])
        for c in containers(doc):
            args = [a.replace("/etc/udpgate", f"{tmp}/etc/udpgate") for a in c.get("args", [])]
            env = {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
            env["PATH"] = os.environ["PATH"]
            r = subprocess.run([f"{tmp}/udpgate-server", *args, "-print-config"], env=env,
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"FAIL: {path}: {kind} container {c['name']}: the server refuses its settings:\n{r.stderr}")
        print(f"ok: {path}: {kind}")
PY
else
  echo "skipped: no python3 with PyYAML"
fi
echo "not checked here: docker build (no daemon), applying to a cluster, a real Agones sidecar"
