"""The Android toolchain the app build drives: finding the tools, signing, and talking to phones.

- ``tools``: one class per external tool (JDK, SDK, build tools, adb, Gradle, qemu) with ``verify()``.
- ``signing``: the debug key, release keys, zipalign, apksigner sign/verify.
- ``adb``: devices, install, start, logcat, pull, reverse.
- ``doctor``: what is installed and whether an APK can be built here (``tvmgen doctor``).
- ``downloads``: the pinned URLs, SHA-256 values and versions, and tvmgen's data directory.
- ``install``: ``tvmgen doctor --install`` / ``tvmgen app --yes``: fetch what the APK build lacks.
"""
