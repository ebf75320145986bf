#!/usr/bin/env bash
# Create .venv and install core, every plugin (editable) and the test tools.
# Idempotent: a second run only checks what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
# torch first, pinned: 2.13.0 is a CPU build (an open range pulls a multi-GB CUDA build).
"${PIP[@]}" install torch==2.13.0
editable=(-e ".[test]")
for plugin in plugins/causalab-*/; do
  case "$plugin" in
    plugins/causalab-testing/) editable+=(-e "${plugin}[ndif-server]") ;;
    plugins/causalab-report/) editable+=(-e "${plugin}[test]") ;;  # Selenium, for its browser tests
    *) editable+=(-e "$plugin") ;;
  esac
done
"${PIP[@]}" install -c constraints.txt "${editable[@]}"
# The NDIF server the remote tests start: ndif declares Python >= 3.12 but runs
# on 3.11, so it goes in without its metadata's checks (its needs are the
# causalab-testing[ndif-server] extra above), and redis-server comes from Debian;
# so do the headless browser and its driver that causalab-report's tests use.
"${PIP[@]}" install --no-deps --ignore-requires-python -c constraints.txt ndif
debian=()
command -v redis-server >/dev/null || debian+=(redis-server)
command -v chromium >/dev/null || debian+=(chromium)
command -v chromedriver >/dev/null || debian+=(chromium-driver)
if [ ${#debian[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debian[@]}" >/dev/null
  else
    echo "install ${debian[*]} (Debian: apt-get install ${debian[*]}) to run the NDIF and report browser tests" >&2
  fi
fi
echo "causalab installed in .venv ($(.venv/bin/causalab --help >/dev/null && echo ok))"
