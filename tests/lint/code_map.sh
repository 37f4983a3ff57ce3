#!/bin/sh
# The code map stays true: every source file of userspace/ is named (by its base name) in docs/how-it-works.md.
cd "$(dirname "$0")/../.." || exit 2
missing=0
for f in userspace/*/*.cpp; do
  name=$(basename "$f" .cpp)
  if ! grep -qw -- "$name" docs/how-it-works.md; then
    echo "docs/how-it-works.md does not name $f" >&2
    missing=1
  fi
done
exit $missing
