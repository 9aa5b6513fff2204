# Leaves committed release sets out of a device call's carry, and puts them back afterwards.
#
# A device call carries the tracked tree, untracked files git does not ignore, and `carry`, 64 MiB in all; the
# wheels (.whl-x) take 22.5 MB. With both release sets (LLaVA-OV's 20.5 MB and Qwen2.5-VL's 9.7 MB in data/releases/)
# the tree no longer fits beside them (tests/test_repo_budget.py). A call that does not read a set leaves it here:
#
#   bash .gpu/thin.sh            # THIN (default: data/releases/qwen2.5-vl) is untracked in the index and ignored
#   ... the device call ...      # a call that needs the set names it in `carry` instead
#   bash .gpu/thin.sh --restore  # tracked again, exactly as committed; nothing on disk moved
#
# Nothing is committed while thinned: `git commit` would record the set as deleted, so the script refuses to thin
# with staged changes, and --restore puts the index back. The files never leave the disk.
set -euo pipefail
ROOT=$(git rev-parse --show-toplevel)
cd "$ROOT"
THIN=${THIN:-data/releases/qwen2.5-vl}
EXCLUDE=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$EXCLUDE")"
touch "$EXCLUDE"
if [[ "${1:-}" == --restore ]]; then
  for p in $THIN; do
    grep -vxF "/$p/" "$EXCLUDE" > "$EXCLUDE.tmp" || true
    mv "$EXCLUDE.tmp" "$EXCLUDE"
    git add -- "$p"
  done
  echo "thin.sh: $THIN tracked again"
  git status --short -- $THIN
  exit 0
fi
if ! git diff --cached --quiet; then
  echo "thin.sh: the index has staged changes; commit or unstage them first" >&2
  exit 2
fi
for p in $THIN; do
  [[ -d "$p" ]] || { echo "thin.sh: no $p" >&2; exit 2; }
  git rm -r -q --cached -- "$p"
  grep -qxF "/$p/" "$EXCLUDE" || echo "/$p/" >> "$EXCLUDE"
done
echo "thin.sh: $THIN left out of device calls; run 'bash .gpu/thin.sh --restore' after the call, before any commit"
