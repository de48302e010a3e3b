//! Reads and checks a safetensors file's header without loading its data.
//!
//! Format: 8 bytes little-endian header length `n`, then `n` bytes of JSON mapping tensor names
//! to `{dtype, shape, data_offsets: [begin, end]}` (offsets relative to the data section that
//! follows the header), plus an optional `__metadata__` map of strings. The checks mirror what the
//! `safetensors` loader refuses: offsets must tile the data section exactly, in order, without
//! gaps, and each tensor's byte length must equal its element count times its dtype width.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// Largest header the reference implementation accepts.
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// One tensor entry of a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Element type as written in the header (`BF16`, `F8_E4M3`, …).
    pub dtype: String,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// `[begin, end)` within the data section.
    pub data_offsets: (u64, u64),
}

/// A parsed, consistent header.
#[derive(Debug, Clone, Default)]
pub struct Header {
    /// Tensors by name.
    pub tensors: BTreeMap<String, TensorInfo>,
    /// Length of the JSON header in bytes.
    pub header_len: u64,
}

/// Width in bits of one element of `dtype`, for every dtype the reference implementation knows.
pub fn dtype_bits(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" | "F8_E4M3FNUZ"
        | "F8_E5M2FNUZ" => 8,
        "I16" | "U16" | "F16" | "BF16" => 16,
        "I32" | "U32" | "F32" => 32,
        "I64" | "U64" | "F64" | "C64" => 64,
        _ => return None,
    })
}

/// Reads the header of the file at `path` and checks it against the file's length.
/// The error is a sentence without the file name (the caller adds it).
pub fn read_header(path: &Path) -> Result<Header, String> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("cannot be opened: {e}"))?;
    let file_len = file
        .metadata()
        .map_err(|e| format!("cannot be inspected: {e}"))?
        .len();
    if file_len < 8 {
        return Err(format!(
            "is {file_len} bytes long, too short for a safetensors header (truncated download?)"
        ));
    }
    let mut len_bytes = [0u8; 8];
    file.read_exact(&mut len_bytes)
        .map_err(|e| format!("header length cannot be read: {e}"))?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > MAX_HEADER_LEN {
        return Err(format!(
            "declares a header of {header_len} bytes, above the {MAX_HEADER_LEN}-byte limit: not a safetensors file or corrupt"
        ));
    }
    if header_len + 8 > file_len {
        return Err(format!(
            "declares a header of {header_len} bytes but the file is only {file_len} bytes long (truncated)"
        ));
    }
    let mut json = Vec::new();
    file.take(header_len)
        .read_to_end(&mut json)
        .map_err(|e| format!("header cannot be read: {e}"))?;
    if json.len() as u64 != header_len {
        return Err(format!(
            "header is shorter than the declared {header_len} bytes (truncated)"
        ));
    }
    parse_header(&json, file_len - 8 - header_len)
}

/// Parses header JSON and checks it against a data section of `data_len` bytes.
pub fn parse_header(json: &[u8], data_len: u64) -> Result<Header, String> {
    let text = std::str::from_utf8(json).map_err(|_| "header is not UTF-8 text".to_string())?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("header is not valid JSON: {e}"))?;
    let serde_json::Value::Object(entries) = value else {
        return Err("header is not a JSON object".to_string());
    };
    let mut tensors = BTreeMap::new();
    for (name, entry) in entries {
        if name == "__metadata__" {
            let ok = entry
                .as_object()
                .is_some_and(|m| m.values().all(serde_json::Value::is_string));
            if !ok {
                return Err("`__metadata__` must map strings to strings".to_string());
            }
            continue;
        }
        let info = parse_entry(&entry).map_err(|e| format!("tensor `{name}`: {e}"))?;
        tensors.insert(name, info);
    }
    let header = Header {
        tensors,
        header_len: json.len() as u64,
    };
    check_layout(&header, data_len)?;
    Ok(header)
}

fn parse_entry(entry: &serde_json::Value) -> Result<TensorInfo, String> {
    let obj = entry.as_object().ok_or("entry is not an object")?;
    let dtype = obj
        .get("dtype")
        .and_then(serde_json::Value::as_str)
        .ok_or("missing string `dtype`")?
        .to_string();
    let shape = obj
        .get("shape")
        .and_then(serde_json::Value::as_array)
        .ok_or("missing array `shape`")?
        .iter()
        .map(|d| d.as_u64().ok_or("`shape` holds a non-integer"))
        .collect::<Result<Vec<_>, _>>()?;
    let offsets = obj
        .get("data_offsets")
        .and_then(serde_json::Value::as_array)
        .ok_or("missing array `data_offsets`")?;
    let [begin, end] = offsets.as_slice() else {
        return Err("`data_offsets` must be [begin, end]".to_string());
    };
    let (Some(begin), Some(end)) = (begin.as_u64(), end.as_u64()) else {
        return Err("`data_offsets` must be non-negative integers".to_string());
    };
    Ok(TensorInfo {
        dtype,
        shape,
        data_offsets: (begin, end),
    })
}

/// Every tensor's size matches dtype × shape, and the tensors tile `[0, data_len)` in order.
fn check_layout(header: &Header, data_len: u64) -> Result<(), String> {
    let mut spans = Vec::with_capacity(header.tensors.len());
    for (name, t) in &header.tensors {
        let bits = dtype_bits(&t.dtype)
            .ok_or_else(|| format!("tensor `{name}` has unknown dtype `{}`", t.dtype))?;
        let bytes = t
            .shape
            .iter()
            .try_fold(bits, |acc, d| acc.checked_mul(*d))
            .filter(|b| b % 8 == 0)
            .map(|b| b / 8)
            .ok_or_else(|| {
                format!(
                    "tensor `{name}` shape {:?} × {} overflows or is not a whole number of bytes",
                    t.shape, t.dtype
                )
            })?;
        let (begin, end) = t.data_offsets;
        if end < begin || end - begin != bytes {
            return Err(format!(
                "tensor `{name}` has data_offsets [{begin}, {end}] but {} × {:?} needs {bytes} bytes",
                t.dtype, t.shape
            ));
        }
        if end > data_len {
            return Err(format!(
                "tensor `{name}` ends at byte {end} of the data section but only {data_len} bytes follow the header (truncated)"
            ));
        }
        spans.push((begin, end, name.as_str()));
    }
    spans.sort();
    let mut cursor = 0;
    for (begin, end, name) in spans {
        if begin != cursor {
            return Err(format!(
                "tensor `{name}` starts at byte {begin} where {cursor} was expected (overlapping or gapped data_offsets)"
            ));
        }
        cursor = end;
    }
    if cursor != data_len {
        return Err(format!(
            "tensors cover {cursor} bytes but the data section holds {data_len} (trailing bytes)"
        ));
    }
    Ok(())
}

/// Serialises a safetensors file from `(name, dtype, shape, data)` tuples (fixtures and tests).
/// The output is byte-for-byte deterministic: `__metadata__` first, then tensors by name.
pub fn encode(tensors: &[(&str, &str, Vec<u64>, Vec<u8>)]) -> Vec<u8> {
    let mut sorted: Vec<_> = tensors.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut json = String::from(r#"{"__metadata__":{"format":"pt"}"#);
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in sorted {
        let begin = data.len();
        data.extend_from_slice(bytes);
        let shape: Vec<String> = shape.iter().map(u64::to_string).collect();
        json.push_str(&format!(
            r#",{}:{{"dtype":{},"shape":[{}],"data_offsets":[{begin},{}]}}"#,
            serde_json::Value::from(*name),
            serde_json::Value::from(*dtype),
            shape.join(","),
            data.len()
        ));
    }
    json.push('}');
    // Pad to 8 bytes as the reference writer does, so the data section is aligned.
    let pad = (8 - json.len() % 8) % 8;
    json.extend(std::iter::repeat_n(' ', pad));
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(&data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        encode(&[
            ("a", "F32", vec![2, 2], vec![0; 16]),
            ("b", "BF16", vec![3], vec![1; 6]),
        ])
    }

    fn split(bytes: &[u8]) -> (&[u8], u64) {
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        (&bytes[8..8 + n], (bytes.len() - 8 - n) as u64)
    }

    #[test]
    fn round_trip() {
        let bytes = sample();
        let (json, data_len) = split(&bytes);
        let header = parse_header(json, data_len).unwrap();
        assert_eq!(header.tensors.len(), 2);
        assert_eq!(header.tensors["b"].data_offsets, (16, 22));
    }

    #[test]
    fn rejects_short_data() {
        let bytes = sample();
        let (json, data_len) = split(&bytes);
        let err = parse_header(json, data_len - 1).unwrap_err();
        assert!(err.contains("truncated"), "{err}");
    }

    #[test]
    fn rejects_trailing_bytes() {
        let bytes = sample();
        let (json, data_len) = split(&bytes);
        let err = parse_header(json, data_len + 4).unwrap_err();
        assert!(err.contains("trailing"), "{err}");
    }

    #[test]
    fn rejects_wrong_sizes_and_dtypes() {
        let cases = [
            (
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
                4,
                "needs 8 bytes",
            ),
            (
                r#"{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,1]}}"#,
                1,
                "unknown dtype",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}"#,
                4,
                "needs 4 bytes",
            ),
            (r#"{"a":{"dtype":"F32","shape":[1]}}"#, 4, "data_offsets"),
            (
                r#"{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}"#,
                1,
                "whole number",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}"#,
                3,
                "overlapping",
            ),
            (r#"[1,2]"#, 0, "not a JSON object"),
            (r#"{"__metadata__":{"x":1}}"#, 0, "__metadata__"),
            (r#"{"#, 0, "not valid JSON"),
        ];
        for (json, data_len, want) in cases {
            let err = parse_header(json.as_bytes(), data_len).unwrap_err();
            assert!(err.contains(want), "{json}: {err}");
        }
    }

    #[test]
    fn sub_byte_dtypes() {
        let json = r#"{"a":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}}"#;
        assert!(parse_header(json.as_bytes(), 2).is_ok());
    }
}
