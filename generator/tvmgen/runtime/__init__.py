"""Running artifacts here: the host runner (Relax VM), --check, building the device runtime in jni/ with CMake, embed bundles."""
