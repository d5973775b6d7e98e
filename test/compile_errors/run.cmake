# Each snippet here is a libtorch habit that cannot compile in reel: it must fail to
# compile, and the compiler's output must hold the "// expect:" line of its first line,
# the message that says what to write instead (issue 36 point 8).
# -DCXX=<compiler> -DINCLUDE=<dir holding reel/> -DSNIPPETS=<this folder>
file(GLOB snippets ${SNIPPETS}/*.cpp)
set(failed "")
foreach(s ${snippets})
  file(STRINGS ${s} first LIMIT_COUNT 1)
  string(REGEX REPLACE "^// expect: " "" want "${first}")
  execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE} ${s}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  get_filename_component(name ${s} NAME)
  string(FIND "${err}${out}" "${want}" at)
  if(rc EQUAL 0)
    list(APPEND failed "${name}: compiled, expected an error")
  elseif(at EQUAL -1)
    list(APPEND failed "${name}: the error does not say '${want}':\n${err}")
  else()
    message(STATUS "${name}: fails with '${want}'")
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "${failed}")
endif()
