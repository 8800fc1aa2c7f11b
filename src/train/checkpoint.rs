//! Checkpoints: everything needed to continue training bit-exactly (parameters, Adam
//! moments, counters, architecture), as one deterministic byte string stored as a blob.
//!
//! Layout: magic `MLCKPT01`, u64 LE header length, the header (codec-encoded
//! [`Header`]), then raw little-endian f32 data of every parameter in name order, then
//! every first moment, then every second moment. The *parameter hash* is blake3 over the
//! parameters alone (name, shape, raw bytes, in name order), so it does not depend on the
//! container and equals the hash the trainer records at every gradient step.
use super::adam::{named_params, Adam};
use crate::record::codec;
use crate::record::Hash;
use tch::{nn, Device, Kind, Tensor};

const PARAMS_CONTEXT: &str = "mapf-ledger 2026 params v1";

/// Append `t`'s values as f32 little-endian bytes to `out`: copied from the host
/// tensor's storage in one call (a float's native bytes are its little-endian bytes
/// on a little-endian host), not a float at a time.
fn tensor_bytes(t: &Tensor, out: &mut Vec<u8>) {
    let t = t.to_kind(Kind::Float).to_device(Device::Cpu).contiguous();
    let n = t.numel();
    let start = out.len();
    out.resize(start + n * 4, 0);
    t.copy_data_u8(&mut out[start..], n);
    #[cfg(target_endian = "big")]
    for c in out[start..].chunks_exact_mut(4) {
        c.reverse();
    }
}

/// blake3 over the parameters in name order (name, shape, raw f32 LE bytes).
pub fn param_hash(vs: &nn::VarStore) -> Hash {
    let mut h = blake3::Hasher::new_derive_key(PARAMS_CONTEXT);
    let mut buf = Vec::new();
    for (name, p) in named_params(vs) {
        h.update(&(name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        let shape = p.size();
        h.update(&(shape.len() as u64).to_le_bytes());
        for d in shape {
            h.update(&d.to_le_bytes());
        }
        buf.clear();
        tensor_bytes(&p, &mut buf);
        h.update(&buf);
    }
    Hash(*h.finalize().as_bytes())
}

/// Serialise parameters, optimiser state and counters.
pub fn save(
    vs: &nn::VarStore,
    adam: &Adam,
    policy: &str,
    arch: Vec<u8>,
    global_step: u64,
    stage: u32,
) -> Vec<u8> {
    let params = named_params(vs);
    let header = Header {
        policy: policy.to_string(),
        arch,
        global_step,
        stage,
        adam: adam.config,
        adam_step: adam.step,
        tensors: params.iter().map(|(n, p)| (n.clone(), p.size())).collect(),
    };
    let head = codec::encode(&header);
    let mut out = Vec::with_capacity(16 + head.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(head.len() as u64).to_le_bytes());
    out.extend_from_slice(&head);
    for (_, p) in &params {
        tensor_bytes(p, &mut out);
    }
    for (_, m, _) in &adam.moments {
        tensor_bytes(m, &mut out);
    }
    for (_, _, v) in &adam.moments {
        tensor_bytes(v, &mut out);
    }
    out
}

pub use crate::record::checkpoint::{header, CheckpointError, Header, MAGIC};

/// Load a checkpoint into `vs` (whose parameters must match by name and shape) and
/// return the header and the restored optimiser.
pub fn load(bytes: &[u8], vs: &mut nn::VarStore) -> Result<(Header, Adam), CheckpointError> {
    let (h, mut off) = header(bytes)?;
    let params = named_params(vs);
    let theirs: Vec<(String, Vec<i64>)> =
        params.iter().map(|(n, p)| (n.clone(), p.size())).collect();
    if theirs != h.tensors {
        return Err(CheckpointError::Mismatch(format!(
            "checkpoint tensors {:?}, policy tensors {:?}",
            h.tensors, theirs
        )));
    }
    let mut take = |shape: &[i64], what: &str| -> Result<Tensor, CheckpointError> {
        let n: i64 = shape.iter().product();
        let len = n as usize * 4;
        let end = off
            .checked_add(len)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| CheckpointError::Truncated(what.to_string()))?;
        let vals: Vec<f32> = bytes[off..end]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4")))
            .collect();
        off = end;
        Ok(Tensor::from_slice(&vals).view(shape))
    };
    let _guard = tch::no_grad_guard();
    let device = vs.device();
    for (name, p) in &params {
        let t = take(&p.size(), name)?;
        p.shallow_clone().copy_(&t.to_device(device));
    }
    let mut adam = Adam::new(vs, h.adam);
    adam.step = h.adam_step;
    for (name, m, _) in adam.moments.iter_mut() {
        let t = take(&m.size(), &format!("{name} (first moment)"))?;
        m.copy_(&t.to_device(device));
    }
    for (name, _, v) in adam.moments.iter_mut() {
        let t = take(&v.size(), &format!("{name} (second moment)"))?;
        v.copy_(&t.to_device(device));
    }
    if off != bytes.len() {
        return Err(CheckpointError::Truncated(format!(
            "{} trailing bytes",
            bytes.len() - off
        )));
    }
    Ok((h, adam))
}

/// Write the parameters as a safetensors file (for Python users).
pub fn export_safetensors(vs: &nn::VarStore, path: &std::path::Path) -> Result<(), tch::TchError> {
    let params = named_params(vs);
    let named: Vec<(&str, Tensor)> = params
        .iter()
        .map(|(n, p)| (n.as_str(), p.to_device(Device::Cpu)))
        .collect();
    Tensor::write_safetensors(&named, path)
}
