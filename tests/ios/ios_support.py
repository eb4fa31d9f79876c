"""What the iOS test modules share: the Apple team id the projects are made with, and the symbols of
TVM's system library that the model archive must hold."""

TEAM = "AB12CD34EF"
# What TVM 0.27 emits for a system library (seen with llvm-nm on the objects): the packed VM
# executable under __tvm_ffi__library_bin, and static initialisers that register it and each
# kernel through TVMFFIEnvModRegisterSystemLibSymbol (Mach-O adds a leading underscore).
LIBRARY_BIN = "___tvm_ffi__library_bin"
REGISTER = "_TVMFFIEnvModRegisterSystemLibSymbol"
