//! Decode steps replayed as CUDA graphs (issue 78): the C ABI of the shim
//! `tools/cuda-graph/graph.cpp`, loaded at run time, and the one notice a process
//! prints when it decodes without it.
//!
//! tch has no graph API, and the CPU build takes no CUDA dependency, so the shim is a
//! shared library built apart (`tools/cuda-graph.sh`) and opened with `dlopen` the
//! first time a graphed decode runs on a GPU: from `$MAPF_CUDA_GRAPH` when set, else
//! `libmapf_cuda_graph.so` beside the running binary. Its symbols are torch's own
//! (`at::cuda::CUDAGraph`), which the process has once `--device cuda` has loaded
//! `libtorch_cuda.so` (see `train::open_device`).
//!
//! A graph holds the kernels one call of a closure queued, with their arguments' device
//! addresses: replaying it reruns them on the same buffers without the host issuing a
//! single op. So what a captured closure reads and writes must be tensors made before
//! the capture that stay alive as long as the graph, and nothing in it may read back
//! to the host ([`super::model::Model::decode_fixed`] is such a step).
//!
//! Without the shim (not built, not found, the wrong ABI, or no GPU), [`shim`] returns
//! the reason and the first caller prints it once on stderr; the decode then runs the
//! windowed loop ([`super::generate::DecodeLoop::Graphed`]).
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::{Once, OnceLock};
use tch::Device;

/// The environment variable naming the shim library.
pub const SHIM_ENV: &str = "MAPF_CUDA_GRAPH";
/// The shim's file name (what `tools/cuda-graph.sh` builds).
pub const SHIM_FILE: &str = "libmapf_cuda_graph.so";
/// The ABI version of `mapf_graph_abi()` this module speaks.
const ABI: c_int = 1;
/// Bytes of the error message buffer each call gets.
const ERR_LEN: usize = 1024;

type Abi = unsafe extern "C" fn() -> c_int;
type Begin = unsafe extern "C" fn(c_int, *mut c_char, usize) -> *mut c_void;
type Op = unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> c_int;
type Free = unsafe extern "C" fn(*mut c_void);

/// Why graphs are not at hand, or a graph failed; each names what is at fault.
#[derive(Clone, Debug, thiserror::Error)]
pub enum GraphError {
    #[error("CUDA graphs need a GPU and this decode runs on the CPU")]
    Cpu,
    #[error("{} did not load ({reason})", path.display())]
    Load { path: PathBuf, reason: String },
    #[error("{} has no {symbol} (not the shim of tools/cuda-graph.sh?)", path.display())]
    Symbol { path: PathBuf, symbol: String },
    #[error("{} speaks shim ABI {found}, this binary {ABI}: rebuild it with tools/cuda-graph.sh", path.display())]
    Abi { path: PathBuf, found: i32 },
    #[error("capture did not begin: {0}")]
    Begin(String),
    #[error("capture did not end: {0}")]
    End(String),
    #[error("replay failed: {0}")]
    Replay(String),
}

/// The loaded shim's entry points.
pub struct Shim {
    path: PathBuf,
    begin: Begin,
    end: Op,
    replay: Op,
    free: Free,
}

impl Shim {
    /// Where it was loaded from.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

/// Where the shim is looked for: `$MAPF_CUDA_GRAPH`, else beside the running binary.
pub fn shim_path() -> PathBuf {
    match std::env::var_os(SHIM_ENV) {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.join(SHIM_FILE)))
            .unwrap_or_else(|| PathBuf::from(SHIM_FILE)),
    }
}

/// Open the shim at `path` and check its ABI; Err: why not, naming the path.
pub fn load(path: &std::path::Path) -> Result<Shim, GraphError> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| GraphError::Load {
        path: path.to_path_buf(),
        reason: "a path with a NUL byte".into(),
    })?;
    // SAFETY: dlopen with a valid C string. The handle is never closed: graphs made
    // from it live as long as the process may.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(GraphError::Load {
            path: path.to_path_buf(),
            reason: dl_error(),
        });
    }
    let sym = |name: &CStr| {
        // SAFETY: dlsym on a live handle with a valid C string.
        let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
        if p.is_null() {
            Err(GraphError::Symbol {
                path: path.to_path_buf(),
                symbol: name.to_string_lossy().into_owned(),
            })
        } else {
            Ok(p)
        }
    };
    // SAFETY: each symbol is the C function of tools/cuda-graph/graph.cpp with the
    // signature its type names (checked by the ABI version below).
    unsafe {
        let abi: Abi = std::mem::transmute(sym(c"mapf_graph_abi")?);
        let found = abi();
        if found != ABI {
            return Err(GraphError::Abi {
                path: path.to_path_buf(),
                found,
            });
        }
        Ok(Shim {
            path: path.to_path_buf(),
            begin: std::mem::transmute::<*mut c_void, Begin>(sym(c"mapf_graph_capture_begin")?),
            end: std::mem::transmute::<*mut c_void, Op>(sym(c"mapf_graph_capture_end")?),
            replay: std::mem::transmute::<*mut c_void, Op>(sym(c"mapf_graph_replay")?),
            free: std::mem::transmute::<*mut c_void, Free>(sym(c"mapf_graph_free")?),
        })
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns a thread-local C string or null.
    let err = unsafe { libc::dlerror() };
    if err.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated, valid until the next dl call on this thread.
        unsafe { CStr::from_ptr(err) }
            .to_string_lossy()
            .into_owned()
    }
}

/// The shim for decoding on `device`, loaded once per process; Err: why a graphed
/// decode cannot replay graphs there.
pub fn shim(device: Device) -> Result<&'static Shim, GraphError> {
    if device == Device::Cpu {
        return Err(GraphError::Cpu);
    }
    static SHIM: OnceLock<Result<Shim, GraphError>> = OnceLock::new();
    SHIM.get_or_init(|| load(&shim_path()))
        .as_ref()
        .map_err(Clone::clone)
}

/// The notice a graphed decode without graphs prints, once per process.
pub fn fallback_notice(why: &GraphError) -> String {
    format!(
        "decode: no CUDA graphs ({why}); decoding with the windowed loop instead (build the shim with tools/cuda-graph.sh, or set {SHIM_ENV})"
    )
}

/// Print [`fallback_notice`] on stderr the first time it is called in this process;
/// returns whether this call printed it.
pub fn say_fallback_once(why: &GraphError) -> bool {
    static SAID: Once = Once::new();
    let mut printed = false;
    SAID.call_once(|| {
        eprintln!("{}", fallback_notice(why));
        printed = true;
    });
    printed
}

/// One captured graph: the kernels a closure queued, replayed on demand.
pub struct Graph {
    shim: &'static Shim,
    handle: *mut c_void,
}

impl Graph {
    /// Capture what `step` queues on CUDA device `index` (it does not run: call
    /// [`Graph::replay`] for that). Every tensor `step` touches must outlive the graph.
    pub fn capture(
        shim: &'static Shim,
        index: usize,
        step: impl FnOnce(),
    ) -> Result<Graph, GraphError> {
        let mut err = vec![0 as c_char; ERR_LEN];
        // SAFETY: the shim's documented C ABI; `err` has ERR_LEN bytes.
        let handle = unsafe { (shim.begin)(index as c_int, err.as_mut_ptr(), ERR_LEN) };
        if handle.is_null() {
            return Err(GraphError::Begin(message(&err)));
        }
        let graph = Graph { shim, handle };
        // A panic inside `step` would leave the stream capturing; the shim's end
        // restores the stream whatever the capture's state, so it runs in any case.
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(step));
        // SAFETY: a live handle from begin; `err` has ERR_LEN bytes.
        let rc = unsafe { (shim.end)(graph.handle, err.as_mut_ptr(), ERR_LEN) };
        if let Err(p) = caught {
            drop(graph);
            std::panic::resume_unwind(p);
        }
        if rc != 0 {
            return Err(GraphError::End(message(&err)));
        }
        Ok(graph)
    }

    /// Run the captured kernels once, on the current stream.
    pub fn replay(&self) -> Result<(), GraphError> {
        let mut err = vec![0 as c_char; ERR_LEN];
        // SAFETY: a live, captured handle; `err` has ERR_LEN bytes.
        match unsafe { (self.shim.replay)(self.handle, err.as_mut_ptr(), ERR_LEN) } {
            0 => Ok(()),
            _ => Err(GraphError::Replay(message(&err))),
        }
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: the handle came from begin and is freed once.
        unsafe { (self.shim.free)(self.handle) }
    }
}

fn message(err: &[c_char]) -> String {
    // SAFETY: the shim NUL-terminates within ERR_LEN (and the buffer starts zeroed).
    unsafe { CStr::from_ptr(err.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_shim_is_refused_naming_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SHIM_FILE);
        let why = load(&path)
            .err()
            .expect("nothing there to load")
            .to_string();
        assert!(why.contains(&path.display().to_string()), "{why}");
        assert!(why.contains("did not load"), "{why}");
    }

    #[test]
    fn a_library_that_is_not_the_shim_is_refused_naming_the_missing_entry() {
        // libc is loaded in every process and has none of the shim's symbols.
        let why = load(std::path::Path::new("libc.so.6"))
            .err()
            .expect("not the shim")
            .to_string();
        assert!(why.contains("mapf_graph_abi"), "{why}");
        assert!(why.contains("tools/cuda-graph.sh"), "{why}");
    }

    #[test]
    fn the_cpu_never_loads_the_shim_and_says_why() {
        let why = shim(Device::Cpu).err().expect("no graphs on the CPU");
        assert!(why.to_string().contains("CPU"), "{why}");
        let notice = fallback_notice(&why);
        assert!(
            notice.contains("windowed loop") && notice.contains(SHIM_ENV),
            "{notice}"
        );
    }
}
