# Sourced by scripts/test: the deployment stage (tests/deploy/) builds with Vercel's own CLI,
# pinned, installed from npm under .data/toolchain/ (Node and npm from Debian when missing).
# uv, which the CLI's Python builder runs, is pinned in requirements-dev.txt and lives in .venv.
# Whatever cannot be installed is left for the stage to report in one line; it never skips.
VERCEL_CLI_VERSION="58.10.0"
vercel_prefix="$ROOT/.data/toolchain/vercel-$VERCEL_CLI_VERSION"
export ERMIS_VERCEL_CLI="$vercel_prefix/node_modules/.bin/vercel"
if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's nodejs and npm for the deployment stage ..." >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; } >/dev/null 2>&1 ||
    echo "warning: could not install nodejs/npm; the deployment stage will fail" >&2
fi
if [ ! -x "$ERMIS_VERCEL_CLI" ] && command -v npm >/dev/null 2>&1; then
  echo "installing vercel@$VERCEL_CLI_VERSION for the deployment stage ..." >&2
  mkdir -p "$vercel_prefix"
  npm install --prefix "$vercel_prefix" --no-audit --no-fund --loglevel=error "vercel@$VERCEL_CLI_VERSION" \
    >"$vercel_prefix/npm.log" 2>&1 ||
    echo "warning: npm could not install vercel@$VERCEL_CLI_VERSION (log: $vercel_prefix/npm.log)" >&2
fi
