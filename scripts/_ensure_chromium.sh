# Sourced by scripts/test and .ci/run: the browser tests drive Debian's Chromium (Playwright
# cannot download a browser here). Installs it when missing and this user can.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium for the browser tests ..." >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 ||
      echo "warning: could not install chromium; the browser tests will fail" >&2
  else
    echo "warning: chromium is not installed (apt-get install chromium); the browser tests will fail" >&2
  fi
fi
