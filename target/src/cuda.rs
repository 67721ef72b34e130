//! The CUDA launcher: loads the driver (`libcuda.so.1`) at run time, moves buffers, launches a
//! [`GpuKernel`] and times it with events. The kernels of a function of several launches run
//! in order on the default stream (each sees the writes of the ones before), timed together.
//!
//! Nothing links against CUDA: on a machine without a driver [`CudaKernel::load`] returns
//! [`CudaError::NoDriver`], whose message starts with "no CUDA driver".

use crate::error::RuntimeError;
use crate::nvptx::GpuKernel;
use lacuna_stage1::Bindings;
use lacuna_stage2::gpu::GpuError;
use lacuna_stage2::BufferKind;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

/// A failure of the CUDA launcher.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CudaError {
    /// The CUDA driver library cannot be loaded (no GPU driver on this machine).
    #[error("no CUDA driver: {reason}")]
    NoDriver {
        /// Why it could not be loaded.
        reason: String,
    },
    /// A driver call failed.
    #[error("CUDA driver call {call} failed with error {code}")]
    Driver {
        /// The call.
        call: &'static str,
        /// The `CUresult`.
        code: i32,
    },
    /// The launch dimensions are invalid for the bound data.
    #[error(transparent)]
    Launch(#[from] GpuError),
    /// The bound data does not fit the kernel.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

type CuResult = c_int;
type Ptr = *mut c_void;

/// The driver entry points used by the launcher.
struct Api {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut Ptr, c_int) -> CuResult,
    primary_ctx_release: unsafe extern "C" fn(c_int) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(Ptr) -> CuResult,
    module_load_data: unsafe extern "C" fn(*mut Ptr, *const c_void) -> CuResult,
    module_get_function: unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> CuResult,
    module_unload: unsafe extern "C" fn(Ptr) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(u64) -> CuResult,
    memcpy_htod: unsafe extern "C" fn(u64, *const c_void, usize) -> CuResult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> CuResult,
    #[allow(clippy::type_complexity)]
    launch: unsafe extern "C" fn(
        Ptr,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        Ptr,
        *mut Ptr,
        *mut Ptr,
    ) -> CuResult,
    event_create: unsafe extern "C" fn(*mut Ptr, c_uint) -> CuResult,
    event_record: unsafe extern "C" fn(Ptr, Ptr) -> CuResult,
    event_synchronize: unsafe extern "C" fn(Ptr) -> CuResult,
    event_elapsed: unsafe extern "C" fn(*mut f32, Ptr, Ptr) -> CuResult,
    event_destroy: unsafe extern "C" fn(Ptr) -> CuResult,
    device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult,
    func_set_attribute: unsafe extern "C" fn(Ptr, c_int, c_int) -> CuResult,
}

/// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN` (`cuda.h`).
const ATTR_MAX_SHARED_OPTIN: c_int = 97;
/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` (`cuda.h`).
const FUNC_ATTR_MAX_DYNAMIC_SHARED: c_int = 8;

fn check(call: &'static str, code: CuResult) -> Result<(), CudaError> {
    if code == 0 {
        Ok(())
    } else {
        Err(CudaError::Driver { call, code })
    }
}

/// Opens the driver library and resolves the entry points.
fn open_driver() -> Result<Api, CudaError> {
    let name = c"libcuda.so.1";
    // SAFETY: `dlopen` with a valid C string; a null handle is handled below.
    let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if lib.is_null() {
        // SAFETY: `dlerror` returns null or a valid C string owned by libc.
        let err = unsafe { libc::dlerror() };
        let reason = if err.is_null() {
            "libcuda.so.1 could not be loaded".to_string()
        } else {
            // SAFETY: non-null, NUL-terminated (see above); copied at once.
            unsafe { CStr::from_ptr(err) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(CudaError::NoDriver { reason });
    }
    let sym = |s: &'static CStr| -> Result<*mut c_void, CudaError> {
        // SAFETY: `lib` is a live handle (never closed: the driver stays loaded).
        let p = unsafe { libc::dlsym(lib, s.as_ptr()) };
        if p.is_null() {
            Err(CudaError::NoDriver {
                reason: format!("libcuda.so.1 lacks {}", s.to_string_lossy()),
            })
        } else {
            Ok(p)
        }
    };
    /// Reinterprets a resolved symbol as the function pointer type `F`.
    ///
    /// # Safety
    /// `p` must be a function with the C signature `F`.
    unsafe fn func<F: Copy>(p: Ptr) -> F {
        debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<Ptr>());
        // SAFETY: `F` is a function pointer type of the same size (caller's contract).
        unsafe { std::mem::transmute_copy::<Ptr, F>(&p) }
    }
    // SAFETY: each symbol is the documented driver API function with the C signature of the
    // field it is stored in (CUDA driver API, `cuda.h`, 64-bit `CUdeviceptr`, `_v2` variants).
    unsafe {
        Ok(Api {
            init: func(sym(c"cuInit")?),
            device_get: func(sym(c"cuDeviceGet")?),
            primary_ctx_retain: func(sym(c"cuDevicePrimaryCtxRetain")?),
            primary_ctx_release: func(sym(c"cuDevicePrimaryCtxRelease_v2")?),
            ctx_set_current: func(sym(c"cuCtxSetCurrent")?),
            module_load_data: func(sym(c"cuModuleLoadData")?),
            module_get_function: func(sym(c"cuModuleGetFunction")?),
            module_unload: func(sym(c"cuModuleUnload")?),
            mem_alloc: func(sym(c"cuMemAlloc_v2")?),
            mem_free: func(sym(c"cuMemFree_v2")?),
            memcpy_htod: func(sym(c"cuMemcpyHtoD_v2")?),
            memcpy_dtoh: func(sym(c"cuMemcpyDtoH_v2")?),
            launch: func(sym(c"cuLaunchKernel")?),
            event_create: func(sym(c"cuEventCreate")?),
            event_record: func(sym(c"cuEventRecord")?),
            event_synchronize: func(sym(c"cuEventSynchronize")?),
            event_elapsed: func(sym(c"cuEventElapsedTime")?),
            event_destroy: func(sym(c"cuEventDestroy_v2")?),
            device_get_attribute: func(sym(c"cuDeviceGetAttribute")?),
            func_set_attribute: func(sym(c"cuFuncSetAttribute")?),
        })
    }
}

/// Whether a CUDA driver can be loaded here; `Err` says why not.
pub fn cuda_available() -> Result<(), CudaError> {
    let api = open_driver()?;
    // SAFETY: `cuInit(0)` is the documented first call.
    check("cuInit", unsafe { (api.init)(0) })
}

/// A PTX kernel loaded into the primary context of device 0. Dropping it unloads the module
/// and releases the context, whatever part of [`CudaKernel::load`] got done.
pub struct CudaKernel {
    api: Api,
    device: c_int,
    /// The retained primary context (null until retained).
    context: Ptr,
    /// The loaded module (null until loaded).
    module: Ptr,
    /// One function per launch of the kernel, in order.
    functions: Vec<Ptr>,
    kernel: GpuKernel,
    /// The structure arrays the kernel reads (`crate::check::accessed_buffers`): `run` refuses
    /// to launch without them.
    accessed: std::collections::BTreeSet<String>,
    /// The device's opt-in limit of shared memory per block, in bytes.
    max_shared: u64,
}

// SAFETY: the handles belong to the primary context, which the driver lets any thread use
// after `cuCtxSetCurrent`, done at the start of every `run`.
unsafe impl Send for CudaKernel {}
// SAFETY: as above; `run` makes the context current on the calling thread first.
unsafe impl Sync for CudaKernel {}

impl std::fmt::Debug for CudaKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaKernel")
            .field("entry", &self.kernel.entry)
            .finish_non_exhaustive()
    }
}

impl Drop for CudaKernel {
    fn drop(&mut self) {
        if self.context.is_null() {
            return;
        }
        // SAFETY: the module (when loaded) was loaded by `load` into the context it retained;
        // each is unloaded or released once, here.
        unsafe {
            (self.api.ctx_set_current)(self.context);
            if !self.module.is_null() {
                (self.api.module_unload)(self.module);
            }
            (self.api.primary_ctx_release)(self.device);
        }
    }
}

/// A device allocation, freed on drop.
struct DeviceBuffer<'a> {
    api: &'a Api,
    ptr: u64,
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by `cuMemAlloc_v2`, freed once.
        unsafe { (self.api.mem_free)(self.ptr) };
    }
}

impl CudaKernel {
    /// Loads the driver, device 0's primary context and the kernel's PTX (JIT-compiled by the
    /// driver).
    pub fn load(kernel: GpuKernel) -> Result<CudaKernel, CudaError> {
        let api = open_driver()?;
        let ptx = CString::new(kernel.ptx.as_bytes()).map_err(|_| CudaError::Driver {
            call: "cuModuleLoadData (PTX holds a NUL byte)",
            code: -1,
        })?;
        let entries = kernel
            .launches
            .iter()
            .map(|k| {
                CString::new(k.entry.as_bytes()).map_err(|_| CudaError::Driver {
                    call: "cuModuleGetFunction (entry holds a NUL byte)",
                    code: -1,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut dev: c_int = 0;
        // SAFETY: documented first calls with a valid out-pointer.
        unsafe {
            check("cuInit", (api.init)(0))?;
            check("cuDeviceGet", (api.device_get)(&mut dev, 0))?;
        }
        // From here on, an early return drops `k`, which undoes what was done.
        let mut k = CudaKernel {
            api,
            device: dev,
            context: std::ptr::null_mut(),
            module: std::ptr::null_mut(),
            functions: vec![std::ptr::null_mut(); entries.len()],
            accessed: crate::check::accessed_buffers(&kernel.func),
            kernel,
            max_shared: 0,
        };
        let mut optin: c_int = 0;
        // SAFETY: documented call sequence with valid out-pointers and NUL-terminated strings;
        // the context and module handles are stored in `k` as soon as they exist.
        unsafe {
            check(
                "cuDevicePrimaryCtxRetain",
                (k.api.primary_ctx_retain)(&mut k.context, dev),
            )?;
            check("cuCtxSetCurrent", (k.api.ctx_set_current)(k.context))?;
            check(
                "cuModuleLoadData",
                (k.api.module_load_data)(&mut k.module, ptx.as_ptr().cast()),
            )?;
            for (function, entry) in k.functions.iter_mut().zip(&entries) {
                check(
                    "cuModuleGetFunction",
                    (k.api.module_get_function)(function, k.module, entry.as_ptr()),
                )?;
            }
            check(
                "cuDeviceGetAttribute",
                (k.api.device_get_attribute)(&mut optin, ATTR_MAX_SHARED_OPTIN, dev),
            )?;
        }
        k.max_shared = u64::try_from(optin).unwrap_or(0);
        Ok(k)
    }

    /// The kernel.
    pub fn kernel(&self) -> &GpuKernel {
        &self.kernel
    }

    /// The dynamic shared memory of launch `launch` on `b` (`sharedMemBytes`), within the
    /// architecture's and the device's limits; above 48 KiB in all, the kernel opts in to it
    /// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`).
    fn shared_memory(&self, launch: usize, b: &Bindings) -> Result<c_uint, CudaError> {
        let k = &self.kernel;
        let Some(shared) = k.launches.get(launch).map(|l| &l.shared) else {
            return Ok(0);
        };
        let dynamic = k.dynamic_shared_of(shared, b)?;
        if dynamic == 0 {
            return Ok(0);
        }
        let static_bytes = shared.static_bytes();
        let total = static_bytes + dynamic;
        if total > self.max_shared {
            return Err(GpuError::SharedMemory {
                bytes: total,
                static_bytes,
                dynamic_bytes: dynamic,
                limit: self.max_shared,
                what: "this device (its opt-in limit per block)".into(),
            }
            .into());
        }
        let bytes = c_uint::try_from(dynamic).map_err(|_| GpuError::SharedMemory {
            bytes: total,
            static_bytes,
            dynamic_bytes: dynamic,
            limit: c_uint::MAX as u64,
            what: "cuLaunchKernel".into(),
        })?;
        if total > lacuna_stage2::gpu_mem::STATIC_SHARED_LIMIT {
            // SAFETY: a function of the loaded module; the value is within the device's limit.
            check("cuFuncSetAttribute", unsafe {
                (self.api.func_set_attribute)(
                    self.functions[launch],
                    FUNC_ATTR_MAX_DYNAMIC_SHARED,
                    bytes as c_int,
                )
            })?;
        }
        Ok(bytes)
    }

    /// Copies the bound buffers to the device, launches once (every kernel of the function in
    /// order, on the default stream), copies written buffers back; returns the kernels' time in
    /// seconds (CUDA events around the sequence of launches).
    ///
    /// # Safety
    ///
    /// As for `CompiledKernel::run`: the device code does no bounds checks, so `b` must be
    /// consistent with the function (as `lacuna_stage1::bind` or `lacuna_stage1::validate`
    /// guarantee for the program it was lowered from). Accesses out of bounds would read or
    /// corrupt other device allocations.
    pub unsafe fn run(&self, b: &mut Bindings) -> Result<f64, CudaError> {
        let api = &self.api;
        // As the JIT's `run`: every value buffer, and every structure array the code reads,
        // must be bound (`lacuna_stage1::validate` lets unbound ones through on that promise).
        for decl in &self.kernel.func.buffers {
            let bound = match &decl.kind {
                BufferKind::Values(_) => b.buffers.contains_key(&decl.name),
                BufferKind::Indptr(ax) => b.axes.get(ax).is_some_and(|a| a.indptr.is_some()),
                BufferKind::Indices(ax) => b.axes.get(ax).is_some_and(|a| a.indices.is_some()),
            };
            if bound {
                continue;
            }
            return Err(match &decl.kind {
                BufferKind::Values(_) => RuntimeError::MissingBuffer {
                    buffer: decl.name.clone(),
                },
                BufferKind::Indptr(axis) | BufferKind::Indices(axis)
                    if self.accessed.contains(&decl.name) =>
                {
                    RuntimeError::MissingStructure {
                        buffer: decl.name.clone(),
                        axis: axis.clone(),
                        array: if matches!(decl.kind, BufferKind::Indptr(_)) {
                            "indptr"
                        } else {
                            "indices"
                        },
                    }
                }
                _ => continue,
            }
            .into());
        }
        let dims = self.kernel.all_launch_dims(b)?;
        let shared_bytes = (0..self.functions.len())
            .map(|k| self.shared_memory(k, b))
            .collect::<Result<Vec<c_uint>, _>>()?;
        let f = &self.kernel.func;
        let params = f
            .params
            .iter()
            .map(|p| {
                b.params
                    .get(p)
                    .copied()
                    .ok_or_else(|| RuntimeError::MissingParam { param: p.clone() })
            })
            .collect::<Result<Vec<i64>, _>>()?;
        // SAFETY: the primary context retained in `load`.
        check("cuCtxSetCurrent", unsafe {
            (api.ctx_set_current)(self.context)
        })?;
        let mut device = Vec::with_capacity(f.buffers.len());
        for decl in &f.buffers {
            let data = match &decl.kind {
                BufferKind::Values(_) => b.buffers.get(&decl.name),
                BufferKind::Indptr(ax) => b.axes.get(ax).and_then(|a| a.indptr.as_ref()),
                BufferKind::Indices(ax) => b.axes.get(ax).and_then(|a| a.indices.as_ref()),
            };
            let mut d = DeviceBuffer { api, ptr: 0 };
            let bytes = data.map_or(0, |a| a.len() * a.dtype().size_bytes());
            if let Some(a) = data {
                if a.dtype() != decl.dtype {
                    return Err(RuntimeError::DType {
                        buffer: decl.name.clone(),
                        expected: decl.dtype,
                        found: a.dtype(),
                    }
                    .into());
                }
            }
            // SAFETY: valid out-pointer; at least one byte (zero-byte allocations fail).
            check("cuMemAlloc_v2", unsafe {
                (api.mem_alloc)(&mut d.ptr, bytes.max(1))
            })?;
            if let Some(a) = data.filter(|_| bytes > 0) {
                let mut host = a.clone();
                // SAFETY: `bytes` bytes are readable at the host pointer and writable at `d`.
                check("cuMemcpyHtoD_v2", unsafe {
                    (api.memcpy_htod)(d.ptr, host.as_mut_ptr().cast(), bytes)
                })?;
            }
            device.push((d, bytes));
        }
        let mut args: Vec<u64> = device.iter().map(|(d, _)| d.ptr).collect();
        args.extend(params.iter().map(|&p| p as u64));
        let mut arg_ptrs: Vec<Ptr> = args.iter_mut().map(|a| (a as *mut u64).cast()).collect();
        let (mut start, mut stop): (Ptr, Ptr) = (std::ptr::null_mut(), std::ptr::null_mut());
        let mut ms: f32 = 0.0;
        // SAFETY: one pointer to an 8-byte argument per kernel parameter, in order (a
        // `CUdeviceptr` per buffer, an `i64` per parameter); events on the default stream.
        unsafe {
            check("cuEventCreate", (api.event_create)(&mut start, 0))?;
            check("cuEventCreate", (api.event_create)(&mut stop, 0))?;
            let r = (|| {
                check(
                    "cuEventRecord",
                    (api.event_record)(start, std::ptr::null_mut()),
                )?;
                for ((&function, (grid, block)), &shared) in
                    self.functions.iter().zip(&dims).zip(&shared_bytes)
                {
                    check(
                        "cuLaunchKernel",
                        (api.launch)(
                            function,
                            grid[0],
                            grid[1],
                            grid[2],
                            block[0],
                            block[1],
                            block[2],
                            shared,
                            std::ptr::null_mut(),
                            arg_ptrs.as_mut_ptr(),
                            std::ptr::null_mut(),
                        ),
                    )?;
                }
                check(
                    "cuEventRecord",
                    (api.event_record)(stop, std::ptr::null_mut()),
                )?;
                check("cuEventSynchronize", (api.event_synchronize)(stop))?;
                check(
                    "cuEventElapsedTime",
                    (api.event_elapsed)(&mut ms, start, stop),
                )
            })();
            (api.event_destroy)(start);
            (api.event_destroy)(stop);
            r?;
        }
        for (decl, (d, bytes)) in f.buffers.iter().zip(&device) {
            if !matches!(
                decl.kind,
                BufferKind::Values(lacuna_stage1::Role::Output | lacuna_stage1::Role::Alloc)
            ) || *bytes == 0
            {
                continue;
            }
            if let Some(a) = b.buffers.get_mut(&decl.name) {
                // SAFETY: the host array has exactly `bytes` bytes (checked above).
                check("cuMemcpyDtoH_v2", unsafe {
                    (api.memcpy_dtoh)(a.as_mut_ptr().cast(), d.ptr, *bytes)
                })?;
            }
        }
        Ok(ms as f64 / 1e3)
    }
}
