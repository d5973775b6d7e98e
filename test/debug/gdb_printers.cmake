# Runs gdb in batch mode on gdb_target and checks what `print` shows, then that
# REEL_BREAK_ON=exp stops the program inside reel::exp called from main.
# -DTARGET=program -DLIBDIR=directory of libreel -DSOURCE=gdb_target.cpp
find_program(GDB gdb)
if(NOT GDB)
  message("SKIPPED: gdb not found")
  return()
endif()

# The source lines gdb should name, found by their marker comments.
file(STRINGS ${SOURCE} lines)
set(n 0)
foreach(l IN LISTS lines)
  math(EXPR n "${n} + 1")
  if(l MATCHES "// gdb line: mul")
    set(mul_line ${n})
  elseif(l MATCHES "// gdb line: exp")
    set(exp_line ${n})
  elseif(l MATCHES "// gdb line: block")
    set(block_line ${n})
  endif()
endforeach()

function(run_gdb out)
  execute_process(COMMAND ${GDB} -nx -batch -iex "add-auto-load-safe-path ${LIBDIR}" ${ARGN} ${TARGET}
                  OUTPUT_VARIABLE text ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("---- gdb ${ARGN}\n${text}${err}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

function(expect text pattern)
  if(NOT text MATCHES "${pattern}")
    message(FATAL_ERROR "gdb output does not match: ${pattern}")
  endif()
endfunction()

run_gdb(text -ex "break reel_gdb_stop" -ex run -ex up
        -ex "print t" -ex "print y" -ex "print big" -ex "print flags" -ex "print none"
        -ex "print *y.impl_.p_->grad_fn.p_" -ex "print y.impl_.p_->shape" -ex "print e.impl_.p_->grad_fn"
        -ex "print m" -ex "print *m.impl_.p_->grad_fn.p_->module")
expect("${text}" "\\$1 = reel::Tensor \\[2, 3\\] f32 cpu = {0, 2, 4, 1, 3, 5}\n")
expect("${text}" "\\$2 = reel::Tensor \\[2, 3\\] f32 cpu requires_grad grad_fn=mul at [^\n]*gdb_target\\.cpp:${mul_line} = {0, 1, 2, 0.5, 1.5, 2.5}\n")
expect("${text}" "\\$3 = reel::Tensor \\[100\\] f64 cpu = {0, 1, 2, 3, 4, 5, \\.\\.\\.}\n")
expect("${text}" "\\$4 = reel::Tensor \\[2, 3\\] bool cpu = {false, false, true, false, true, true}\n")
expect("${text}" "\\$5 = reel::Tensor \\(undefined\\)\n")
expect("${text}" "\\$6 = reel::Node #[0-9]+ mul \\[2, 3\\] f32, \\[2, 3\\] f32 -> \\[2, 3\\] f32 at [^\n]*gdb_target\\.cpp:${mul_line}\n")
expect("${text}" "\\$7 = \\[2, 3\\]\n")
expect("${text}" "\\$8 = reel::Node #[0-9]+ exp \\[2, 3\\] f32 -> \\[2, 3\\] f32 at [^\n]*gdb_target\\.cpp:${exp_line}\n")
# a tensor made inside a submodule's forward: the op, the line in forward() and the module path
expect("${text}" "\\$9 = reel::Tensor \\[3, 2\\] f32 cpu requires_grad grad_fn=linear at [^\n]*gdb_target\\.cpp:${block_line} in block\\.lin = {")
expect("${text}" "\\$10 = reel::ModulePath block\\.lin\n")

run_gdb(text -ex "set environment REEL_BREAK_ON=exp" -ex run -ex bt)
expect("${text}" "SIGTRAP")
# "reel::exp (x=..., site=...)" with libreel's debug info, "reel::exp(reel::Tensor const&,
# reel::Site) ()" from its symbols alone (Release): either way the stop is inside reel::exp.
expect("${text}" "reel::exp ?\\(")
expect("${text}" "main \\(\\) at [^\n]*gdb_target\\.cpp:${exp_line}\n")
