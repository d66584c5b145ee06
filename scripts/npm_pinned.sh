# Sourced by scripts/tokenizer_oracle.sh and scripts/bench_tokenizer.sh.
#
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
