//! Checkpoints: everything needed to continue training bit-exactly (parameters, Adam
//! moments, counters, architecture), as one deterministic byte string stored as a blob.
//!
//! Layout: magic `MLCKPT01`, u64 LE header length, the header (codec-encoded
//! [`Header`]), then raw little-endian f32 data of every parameter in name order, then
//! every first moment, then every second moment. The *parameter hash* is blake3 over the
//! parameters alone (name, shape, raw bytes, in name order), so it does not depend on the
//! container and equals the hash the trainer records at every gradient step.
//!
//! Off the CPU, tensors come back to the host in groups of up to [`TRANSFER_VALUES`]
//! values, each group one device-side concatenation and one copy: one host round trip
//! where there was one a tensor (the base planner's 68, the 4B adapters' 504). The bytes,
//! and so the hash, are the same.
use super::adam::{named_params, Adam};
use crate::record::codec;
use crate::record::Hash;
use std::ops::Range;
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

/// The most values read back in one transfer off the CPU (128 MiB of f32): a group's
/// concatenation is a transient copy on the device, so it stays small beside any model.
const TRANSFER_VALUES: usize = 32 << 20;

/// `tensors` cut into runs read back together: consecutive tensors on one device
/// totalling at most `limit` values; a tensor over `limit` is a run of its own, and
/// `limit` 0 makes every tensor one.
fn transfer_runs(tensors: &[&Tensor], limit: usize) -> Vec<Range<usize>> {
    let mut runs: Vec<Range<usize>> = Vec::new();
    let mut values = 0;
    for (i, t) in tensors.iter().enumerate() {
        let n = t.numel();
        let joins = runs
            .last()
            .is_some_and(|r| t.device() == tensors[r.start].device() && values + n <= limit);
        if joins {
            runs.last_mut().expect("a run").end = i + 1;
            values += n;
        } else {
            runs.push(i..i + 1);
            values = n;
        }
    }
    runs
}

/// How many values to read back in one transfer from `device`: one tensor at a time on
/// the CPU, where each is already in host memory, else [`TRANSFER_VALUES`].
fn transfer_limit(device: Device) -> usize {
    if device == Device::Cpu {
        0
    } else {
        TRANSFER_VALUES
    }
}

/// Append the f32 little-endian bytes of every tensor of `tensors`, in order, to `out`
/// in one transfer: one tensor as it is, several concatenated on their device first.
fn run_bytes(tensors: &[&Tensor], out: &mut Vec<u8>) {
    if let [t] = tensors {
        return tensor_bytes(t, out);
    }
    let flat: Vec<Tensor> = tensors
        .iter()
        .map(|t| t.to_kind(Kind::Float).reshape([-1]))
        .collect();
    tensor_bytes(&Tensor::cat(&flat, 0), out);
}

/// Append the f32 little-endian bytes of every tensor of `tensors`, in order, to `out`,
/// in as few transfers as [`transfer_limit`] allows.
fn tensors_bytes<'a>(tensors: impl IntoIterator<Item = &'a Tensor>, out: &mut Vec<u8>) {
    let tensors: Vec<&Tensor> = tensors.into_iter().collect();
    let device = tensors.first().map_or(Device::Cpu, |t| t.device());
    for run in transfer_runs(&tensors, transfer_limit(device)) {
        run_bytes(&tensors[run], out);
    }
}

/// blake3 over the parameters in name order (name, shape, raw f32 LE bytes).
pub fn param_hash(vs: &nn::VarStore) -> Hash {
    hash_params(&named_params(vs), transfer_limit(vs.device()))
}

/// Add a tensor's name and shape to the parameter hash (its values follow).
fn hash_head(h: &mut blake3::Hasher, name: &str, shape: &[i64]) {
    h.update(&(name.len() as u64).to_le_bytes());
    h.update(name.as_bytes());
    h.update(&(shape.len() as u64).to_le_bytes());
    for d in shape {
        h.update(&d.to_le_bytes());
    }
}

/// [`param_hash`] of `params`, read back in runs of at most `limit` values.
fn hash_params(params: &[(String, Tensor)], limit: usize) -> Hash {
    let mut h = blake3::Hasher::new_derive_key(PARAMS_CONTEXT);
    let tensors: Vec<&Tensor> = params.iter().map(|(_, p)| p).collect();
    let mut buf = Vec::new();
    for run in transfer_runs(&tensors, limit) {
        buf.clear();
        run_bytes(&tensors[run.clone()], &mut buf);
        let mut at = 0;
        for (name, p) in &params[run] {
            hash_head(&mut h, name, &p.size());
            let len = p.numel() * 4;
            h.update(&buf[at..at + len]);
            at += len;
        }
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
    tensors_bytes(params.iter().map(|(_, p)| p), &mut out);
    tensors_bytes(adam.moments.iter().map(|(_, m, _)| m), &mut out);
    tensors_bytes(adam.moments.iter().map(|(_, _, v)| v), &mut out);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Parameters of several shapes and two kinds, names out of insertion order.
    fn params() -> Vec<(String, Tensor)> {
        let vs = nn::VarStore::new(Device::Cpu);
        let root = vs.root();
        tch::manual_seed(11);
        let _ = (&root / "z").randn("weight", &[3, 5], 0.0, 1.0);
        let _ = (&root / "a").randn("bias", &[7], 0.0, 1.0);
        let _ = (&root / "m").randn("w", &[2, 3, 4], 0.0, 1.0);
        let _ = (&root / "k").randn("norm", &[1], 0.0, 1.0);
        let mut params = named_params(&vs);
        // A bf16 tensor is hashed by its f32 values, gathered or alone.
        let half = params[3].1.to_kind(Kind::BFloat16);
        params.push(("q.half".into(), half));
        params
    }

    /// The hash as written before transfers were gathered: each tensor read alone.
    fn hash_each_alone(params: &[(String, Tensor)]) -> Hash {
        let mut h = blake3::Hasher::new_derive_key(PARAMS_CONTEXT);
        for (name, p) in params {
            hash_head(&mut h, name, &p.size());
            let values = Vec::<f32>::try_from(p.to_kind(Kind::Float).reshape([-1])).unwrap();
            for v in values {
                h.update(&v.to_le_bytes());
            }
        }
        Hash(*h.finalize().as_bytes())
    }

    #[test]
    fn gathered_transfers_hash_what_each_tensor_alone_hashes() {
        let params = params();
        let tensors: Vec<&Tensor> = params.iter().map(|(_, p)| p).collect();
        // a.bias 7, k.norm 1, m.w 24, z.weight 15, q.half 15 values.
        assert_eq!(transfer_runs(&tensors, 8), [0..2, 2..3, 3..4, 4..5]);
        assert_eq!(transfer_runs(&tensors, 40), [0..3, 3..5]);
        assert_eq!(transfer_runs(&tensors, 0).len(), 5);
        assert_eq!(
            transfer_limit(tensors[0].device()),
            0,
            "the CPU reads each tensor alone"
        );
        // Gathering is what a device does; forced here on the CPU's tensors.
        let alone = hash_each_alone(&params);
        for limit in [0, 8, 40, 1 << 20] {
            assert_eq!(
                hash_params(&params, limit),
                alone,
                "runs of at most {limit} values"
            );
        }
    }
}
