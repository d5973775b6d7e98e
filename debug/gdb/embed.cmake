# Embeds debug/gdb/reel_printers.py in libreel's .debug_gdb_scripts section: gdb loads
# the pretty-printers with the library itself, from the build tree or an install,
# once the library's directory is on gdb's auto-load safe-path (docs/debugging.md).
# The script is also installed as share/reel/gdb/reel_printers.py for `source`.
set(_reel_gdb_py ${CMAKE_CURRENT_LIST_DIR}/reel_printers.py)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_reel_gdb_py})
file(READ ${_reel_gdb_py} REEL_GDB_SCRIPT)
if(REEL_GDB_SCRIPT MATCHES "@" OR REEL_GDB_SCRIPT MATCHES "\\)reel_gdb_py")
  message(FATAL_ERROR "reel_printers.py must not contain an at-sign or the raw-string delimiter")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/gdb_scripts.cpp.in ${CMAKE_CURRENT_BINARY_DIR}/reel_gdb_scripts.cpp @ONLY)
target_sources(reel_core PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/reel_gdb_scripts.cpp)
include(GNUInstallDirs)
install(FILES ${_reel_gdb_py} DESTINATION ${CMAKE_INSTALL_DATADIR}/reel/gdb)
