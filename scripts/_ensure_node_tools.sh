# Sourced by scripts/test: the Node code the suite tests against, pinned, installed from npm under
# .data/toolchain/ (Node and npm from Debian when missing) — Vercel's CLI for the deployment stage
# (tests/deploy/), the `eventsource` client for the stream tests against scripts/dev, and what
# contracts/generate-client.mjs builds the browser client's validators and types with (Ajv's
# standalone code, json-schema-to-typescript, and the TypeScript compiler that checks them).
# uv, which the CLI's Python builder runs, is pinned in requirements-dev.txt and lives in .venv.
# Whatever cannot be installed is left for its tests to report in one line; they never skip.
VERCEL_CLI_VERSION="58.10.0"
# 4.1.1: the newest release for Debian's Node 20 (5.x needs Node 22); its parser pinned with it.
EVENTSOURCE_PACKAGES="eventsource@4.1.1 eventsource-parser@3.0.6"
if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's nodejs and npm for the Node tools ..." >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; } >/dev/null 2>&1 ||
    echo "warning: could not install nodejs/npm; the tests of Node tools will fail" >&2
fi

# npm_tool <dir under .data/toolchain> <file it provides> <package@version>...
npm_tool() {
  local prefix="$ROOT/.data/toolchain/$1" provides="$2"
  shift 2
  if [ ! -e "$prefix/$provides" ] && command -v npm >/dev/null 2>&1; then
    echo "installing $* ..." >&2
    mkdir -p "$prefix"
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "$@" >"$prefix/npm.log" 2>&1 ||
      echo "warning: npm could not install $* (log: $prefix/npm.log)" >&2
  fi
}

export ERMIS_VERCEL_CLI="$ROOT/.data/toolchain/vercel-$VERCEL_CLI_VERSION/node_modules/.bin/vercel"
npm_tool "vercel-$VERCEL_CLI_VERSION" node_modules/.bin/vercel "vercel@$VERCEL_CLI_VERSION"
export ERMIS_NODE_EVENTSOURCE="$ROOT/.data/toolchain/eventsource-4.1.1/node_modules"
npm_tool eventsource-4.1.1 node_modules/eventsource/package.json $EVENTSOURCE_PACKAGES
export ERMIS_NODE_CONTRACTS="$ROOT/.data/toolchain/contracts/node_modules"
npm_tool contracts node_modules/typescript/package.json ajv@8.20.0 json-schema-to-typescript@16.0.0 typescript@5.9.3
