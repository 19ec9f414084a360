#!/usr/bin/env bash
# Installs what browserfarm needs at run time and in its tests when it is
# missing: the headless shell and full Chromium (Debian's packages; fonts so
# pages render as users see them) and the PostgreSQL server binaries (the farm and the tests start
# private clusters; Debian's usual system cluster is not created). Needs root and apt on Debian/Ubuntu;
# elsewhere it says what to install. Checks that Go is new enough to build.
set -euo pipefail

missing=()
# The farm's default browser is the headless shell; full Chromium is the
# other supported one, and the tests run the browser package on both.
# fonts-liberation only: the tests need no more, while the image and the EC2
# user data also install the CJK and emoji fonts pages are scraped with.
if ! [ -x /usr/lib/chromium/chromium-headless-shell ] && ! command -v chromium-headless-shell >/dev/null 2>&1 \
   && ! command -v chrome-headless-shell >/dev/null 2>&1; then
  missing+=(chromium-headless-shell fonts-liberation)
fi
if ! [ -x /usr/lib/chromium/chromium ] && ! command -v chromium >/dev/null 2>&1 \
   && ! command -v chromium-browser >/dev/null 2>&1 && ! command -v google-chrome >/dev/null 2>&1; then
  missing+=(chromium fonts-liberation)
fi
if [ -z "${FARM_TEST_DATABASE_URL:-}" ] && ! command -v initdb >/dev/null 2>&1 \
   && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  missing+=(postgresql)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${missing[*]}" >&2
    # Only the binaries are wanted: no "main" cluster started as a service.
    if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
      mkdir -p /etc/postgresql-common
      echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: browserfarm needs: ${missing[*]}" >&2
    echo "install them first, e.g.: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

if ! command -v go >/dev/null 2>&1; then
  echo "setup: Go is required to build browserfarm (1.21 or newer; it fetches the 1.26 toolchain itself): https://go.dev/dl/" >&2
  exit 1
fi
gov=$(go env GOVERSION 2>/dev/null || echo go0)
minor=$(echo "$gov" | sed -E 's/^go1\.([0-9]+).*/\1/')
if ! [[ "$minor" =~ ^[0-9]+$ ]] || [ "$minor" -lt 21 ]; then
  echo "setup: $gov is too old to build browserfarm; install Go 1.21 or newer (it then fetches the toolchain go.mod asks for)" >&2
  exit 1
fi
