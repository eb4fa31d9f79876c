"""The iOS side: an Xcode project with the model linked in (TVM system-lib mode), and the Mac tools.

- ``archive``: the model's static library (BSD ar + table of contents), written in Python on any OS.
- ``project``: templates/ios_rpc's context and the project file's deterministic object IDs.
- ``tools``: xcodebuild, the iOS SDK, code-signing identities, devicectl, with ``verify()``.
- ``app``: `tvmgen rpc-app --platform ios-arm64` / `tvmgen app --platform ios-arm64` from model to device.
- ``doctor``: what `tvmgen doctor` says about the Mac side.
"""
