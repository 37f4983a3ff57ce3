#!/bin/sh
# The code map stays true: every source file of userspace/ and bpf/ (.cpp, .h, .def, .c) is named (by its name
# without extension) in docs/how-it-works.md.
cd "$(dirname "$0")/../.." || exit 2
missing=0
for f in userspace/*/*.cpp userspace/*/*.h userspace/*/*.def bpf/*.c bpf/*.h bpf/arch/*.h; do
  name=$(basename "$f"); name=${name%%.*}
  if ! grep -qw -- "$name" docs/how-it-works.md; then
    echo "docs/how-it-works.md does not name $f" >&2
    missing=1
  fi
done
exit $missing
