//! rkubelet: a synchronous, thread-per-module Kubernetes node agent (the
//! crate is src/lib.rs).

fn main() {
    std::process::exit(rkubelet::main());
}

/// libc++abi's demangler, replaced in the static build by one that
/// declines every name (status -2, "not a valid mangled name").
///
/// Its one caller is libc++abi's default terminate handler, which would
/// name the type of an uncaught C++ exception; gRPC's C core is built
/// without exceptions (scripts/static-env.sh), so there never is one, and
/// the handler prints the mangled name when this declines. Defining the
/// symbol here keeps the linker from taking libc++abi's `cxa_demangle.o`,
/// about 110 KB of code (docs/static-build.md). Only the musl build links
/// zig's libc++abi; the glibc build keeps the system's.
///
/// # Safety
///
/// `status` is null or points to a writable `int`, as the C++ ABI says.
#[cfg(target_env = "musl")]
#[no_mangle]
pub unsafe extern "C" fn __cxa_demangle(
    _mangled: *const std::ffi::c_char,
    _buf: *mut std::ffi::c_char,
    _len: *mut usize,
    status: *mut std::ffi::c_int,
) -> *mut std::ffi::c_char {
    const INVALID_MANGLED_NAME: std::ffi::c_int = -2;
    if !status.is_null() {
        // SAFETY: the caller passes a valid `int*` or null (the C++ ABI).
        unsafe { *status = INVALID_MANGLED_NAME };
    }
    std::ptr::null_mut()
}
