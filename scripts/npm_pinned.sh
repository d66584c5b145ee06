# Sourced by scripts/tokenizer_oracle.sh and scripts/bench_tokenizer.sh.
#
# require_node SCRIPT: exits 2, naming SCRIPT and the fix, without node 18 or later and npm
# (scripts/setup.sh installs both).
require_node() {
  command -v node > /dev/null || { echo "$1: node is not installed (bash scripts/setup.sh)" >&2; exit 2; }
  command -v npm > /dev/null || { echo "$1: npm is not installed (bash scripts/setup.sh)" >&2; exit 2; }
  local major
  major="$(node -p 'process.versions.node.split(".")[0]')"
  ((major >= 18)) || { echo "$1: node 18 or later is needed, found $(node --version)" >&2; exit 2; }
}

# npm_install_pinned DIR PKG@VER...: installs the packages into DIR unless each is already there
# at its version, so that a second run fetches nothing.
npm_install_pinned() {
  local dir="$1"; shift
  mkdir -p "$dir"
  local missing=0 spec name version have
  for spec in "$@"; do
    name="${spec%@*}"; version="${spec##*@}"
    have="$(node -e 'try { process.stdout.write(require(process.argv[1]).version) } catch { }' \
      "$dir/node_modules/$name/package.json" 2> /dev/null || true)"
    [[ "$have" == "$version" ]] || missing=1
  done
  if ((missing)); then
    [[ -f "$dir/package.json" ]] || echo '{"name": "strata-tokenizer-oracle", "private": true}' > "$dir/package.json"
    echo "== npm install into $dir: $*"
    (cd "$dir" && npm install --no-audit --no-fund --save-exact --loglevel=error "$@")
  fi
}
