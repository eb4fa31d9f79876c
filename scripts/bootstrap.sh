#!/usr/bin/env bash
# Install everything tvmgen needs on a Debian machine (run as root for apt-get):
#   Debian packages (cross compiler, qemu-user) and a virtual environment in .venv
#   holding tvmgen (editable) with all extras, pinned by scripts/constraints.txt.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  g++                      # host exporter (TVM links model.so with the system C++ compiler)
  g++-aarch64-linux-gnu    # linux-aarch64 exporter
  binutils-aarch64-linux-gnu
  qemu-user                # runs aarch64 binaries on the host (emulated phone CPU)
  cmake                    # builds the device runtime in jni/
  openjdk-17-jdk-headless  # javac/java for the Java API and its JNI headers
  python3-venv
  pocl-opencl-icd ocl-icd-opencl-dev  # CPU OpenCL (PoCL) + ICD loader: libtvmgen_opencl's tests
  clinfo                   # lists OpenCL platforms and devices (diagnosis)
  glslang-tools spirv-tools  # --device vulkan: GLSL -> SPIR-V (glslangValidator), SPIR-V validation (spirv-val)
  libvulkan-dev libvulkan1 mesa-vulkan-drivers  # Vulkan headers + loader, lavapipe (CPU Vulkan): libtvmgen_vulkan's tests
  vulkan-validationlayers  # Khronos' validation layer: the Vulkan kernels' tests run under it
  aapt                     # builds and inspects APKs (aapt package, aapt dump badging)
  zipalign                 # page-aligns an APK's uncompressed .so files before signing
  apksigner                # signs APKs (v2/v3) and verifies signatures
  adb                      # installs and starts apps on a phone, reads logcat
  android-framework-res    # framework-res.apk: the android.* resources aapt links a manifest against
  chromium chromium-driver # headless browser the report tests open pages in (Selenium drives it)
)

# A full disk shows up as pip's "[Errno 28] No space left on device" half way through the install, with
# part of it written: say so before starting. The sizes are what an install here took, with room to spare.
need_space() {  # DIR MiB WHAT [ALSO: another way out]
  local free_mib
  free_mib=$(($(df -Pk "$1" | awk 'NR == 2 {print $4}') / 1024))
  if ((free_mib < $2)); then
    echo "bootstrap: $3 needs about $2 MiB free on $(df -P "$1" | awk 'NR == 2 {print $6}') ($1), which has $free_mib MiB" >&2
    echo "bootstrap: free some space there${4:+ (or $4)}, then run it again" >&2
    exit 4
  fi
}

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "bootstrap: need root to install Debian packages: ${missing[*]}" >&2
    echo "bootstrap: run as root, or install them with: sudo apt-get install ${missing[*]}" >&2
    exit 3
  fi
  need_space /var/cache/apt 1000 "apt-get install of ${#missing[@]} Debian package(s)"
  echo "bootstrap: apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  # the environment holds 3.4 GiB (TensorFlow, PyTorch's CPU build, TVM, onnxruntime, LiteRT); pip unpacks
  # each wheel in its temporary directory first
  need_space . 3700 "the virtual environment (.venv)"
  need_space "${TMPDIR:-/tmp}" 700 "pip's temporary files" "set TMPDIR to a directory on a larger disk"

  echo "bootstrap: creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
echo "bootstrap: pip install -e .[tensorflow,torch,plot,test,bench,tune,dev] (pinned by scripts/constraints.txt)"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c scripts/constraints.txt -e ".[tensorflow,torch,plot,test,bench,tune,dev]"
echo "bootstrap: done; tvmgen is .venv/bin/tvmgen"
