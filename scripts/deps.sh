#!/usr/bin/env bash
# Installs, only when missing, the system tools the tests need beyond Go:
# a C compiler (gcc and clang: the C client's tests build it with both, and
# its fuzz driver needs clang's libFuzzer, in libclang-rt-dev), make, cmake and pkg-config (its
# builds), libsodium's development package (its sealed mode), and Mono
# (mcs and mono: the C# binding's sample). Debian/Ubuntu, with apt-get;
# sudo when not root. scripts/test.sh calls it first.
set -euo pipefail

missing=()
have() { command -v "$1" >/dev/null 2>&1; }
have gcc || missing+=(gcc)
have clang || missing+=(clang libclang-rt-dev)
# clang's sanitizer and libFuzzer runtimes are a recommended package, which
# --no-install-recommends leaves out: check that a fuzz target links.
if have clang && ! printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' |
  clang -x c -fsanitize=fuzzer,address,undefined -o /dev/null - >/dev/null 2>&1; then
  missing+=(libclang-rt-dev)
fi
have make || missing+=(make)
have cmake || missing+=(cmake)
have pkg-config || missing+=(pkg-config)
if ! pkg-config --exists libsodium 2>/dev/null; then missing+=(libsodium-dev); fi
have mcs || missing+=(mono-mcs)
have mono || missing+=(mono-runtime)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if ! have apt-get; then
  echo "deps.sh: missing ${missing[*]} and no apt-get: install them with this system's package manager" >&2
  exit 1
fi
sudo=
if [ "$(id -u)" -ne 0 ]; then
  sudo=sudo
fi
echo "deps.sh: installing ${missing[*]}"
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
