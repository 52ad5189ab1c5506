//! pprof profiles (`profile.proto`, gzipped): the stacks of a flame graph, symbolized, for
//! `go tool pprof`, Grafana Pyroscope and speedscope. Sample types `inuse_objects/count`
//! and `inuse_space/bytes` (the default). Inlined frames share a location, innermost line
//! first, as the format says.
//!
//! The protobuf wire format is written by hand: a profile needs varints and
//! length-delimited fields only, and the schema (google/pprof's `profile.proto`) is stable.

use crate::model::FrameReport;
use std::collections::HashMap;
use std::io::Write;

/// One stack to write: frames innermost first, and the two values.
pub struct Sample<'a> {
    /// Frames, innermost first (`inlined` marks a frame inlined into the next).
    pub frames: &'a [FrameReport],
    /// `inuse_objects`.
    pub objects: u64,
    /// `inuse_space`, bytes.
    pub bytes: u64,
}

// Field numbers of google/pprof's profile.proto.
const PROFILE_SAMPLE_TYPE: u32 = 1;
const PROFILE_SAMPLE: u32 = 2;
const PROFILE_MAPPING: u32 = 3;
const PROFILE_LOCATION: u32 = 4;
const PROFILE_FUNCTION: u32 = 5;
const PROFILE_STRING_TABLE: u32 = 6;
const PROFILE_PERIOD_TYPE: u32 = 11;
const PROFILE_PERIOD: u32 = 12;
const PROFILE_COMMENT: u32 = 13;
const PROFILE_DEFAULT_SAMPLE_TYPE: u32 = 14;

/// A protobuf message being written.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn varint(&mut self, mut v: u64) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(byte);
                return;
            }
            self.0.push(byte | 0x80);
        }
    }

    /// A varint field (wire type 0); zero is the default and is left out.
    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.varint(u64::from(field) << 3);
            self.varint(v);
        }
    }

    /// A length-delimited field (wire type 2).
    fn bytes(&mut self, field: u32, data: &[u8]) {
        self.varint((u64::from(field) << 3) | 2);
        self.varint(data.len() as u64);
        self.0.extend_from_slice(data);
    }

    /// A packed repeated varint field.
    fn packed(&mut self, field: u32, values: &[u64]) {
        let mut inner = Message::default();
        for &v in values {
            inner.varint(v);
        }
        self.bytes(field, &inner.0);
    }
}

/// The strings of a profile; index 0 is the empty string, as the format requires.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn id(&mut self, s: &str) -> u64 {
        if self.table.is_empty() {
            self.table.push(String::new());
            self.index.insert(String::new(), 0);
        }
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as u64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// A profile's functions and locations, each written once and numbered from 1 in the order
/// first met, and the strings they name.
#[derive(Default)]
struct Tables {
    strings: Strings,
    functions: HashMap<(String, String), u64>,
    function_msgs: Vec<Message>,
    locations: HashMap<Vec<(u64, i64)>, u64>,
    location_msgs: Vec<Message>,
}

impl Tables {
    /// The id of a frame's function (by name and file), written when first met.
    fn function(&mut self, frame: &FrameReport) -> u64 {
        let file = frame.file.clone().unwrap_or_default();
        let key = (frame.function.clone(), file.clone());
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = self.function_msgs.len() as u64 + 1;
        let mut m = Message::default();
        m.uint(1, id);
        m.uint(2, self.strings.id(&frame.function));
        // No system_name: the name is demangled already, and pprof demangles (and strips
        // `<…>` from) every name equal to its system_name, which turns
        // `alloc::slice::<impl [T]>::to_vec` into `alloc::slice::::to_vec`.
        m.uint(4, self.strings.id(&file));
        self.function_msgs.push(m);
        self.functions.insert(key, id);
        id
    }

    /// The id of the location of `lines` ((function, line), innermost first), written when
    /// first met.
    fn location(&mut self, lines: Vec<(u64, i64)>) -> u64 {
        if let Some(&id) = self.locations.get(&lines) {
            return id;
        }
        let id = self.location_msgs.len() as u64 + 1;
        let mut m = Message::default();
        m.uint(1, id);
        m.uint(2, 1);
        // Distinct addresses, so no tool takes two locations for one.
        m.uint(3, id);
        for &(function, line) in &lines {
            let mut l = Message::default();
            l.uint(1, function);
            l.uint(2, line as u64);
            m.bytes(4, &l.0);
        }
        self.location_msgs.push(m);
        self.locations.insert(lines, id);
        id
    }

    /// A stack's location ids: a location per frame that is not inlined, holding the frames
    /// inlined into it.
    fn stack(&mut self, frames: &[FrameReport]) -> Vec<u64> {
        let mut ids = Vec::new();
        let mut group: Vec<(u64, i64)> = Vec::new();
        for frame in frames {
            let function = self.function(frame);
            group.push((function, i64::from(frame.line.unwrap_or(0))));
            if frame.inlined {
                continue;
            }
            ids.push(self.location(std::mem::take(&mut group)));
        }
        ids
    }
}

/// A `ValueType` message: a kind of value and its unit.
fn value_type(strings: &mut Strings, kind: &str, unit: &str) -> Vec<u8> {
    let mut m = Message::default();
    m.uint(1, strings.id(kind));
    m.uint(2, strings.id(unit));
    m.0
}

/// The profile's one mapping, named `binary`, that has every frame's function, file, line
/// and inlining.
fn mapping(strings: &mut Strings, binary: &str) -> Message {
    let mut mapping = Message::default();
    mapping.uint(1, 1);
    mapping.uint(3, u64::MAX);
    mapping.uint(5, strings.id(binary));
    for has in 7..=10 {
        // has_functions, has_filenames, has_line_numbers, has_inline_frames
        mapping.uint(has, 1);
    }
    mapping
}

/// The encoded (not yet compressed) profile of `samples`; `binary` names its one mapping,
/// `comment` says what it shows.
pub fn encode(samples: &[Sample], binary: &str, comment: &str) -> Vec<u8> {
    let mut tables = Tables::default();
    tables.strings.id("");
    let mut profile = Message::default();
    for (kind, unit) in [("inuse_objects", "count"), ("inuse_space", "bytes")] {
        profile.bytes(
            PROFILE_SAMPLE_TYPE,
            &value_type(&mut tables.strings, kind, unit),
        );
    }
    for sample in samples {
        let mut s = Message::default();
        s.packed(1, &tables.stack(sample.frames));
        s.packed(2, &[sample.objects, sample.bytes]);
        profile.bytes(PROFILE_SAMPLE, &s.0);
    }
    let mut strings = tables.strings;
    profile.bytes(PROFILE_MAPPING, &mapping(&mut strings, binary).0);
    for m in &tables.location_msgs {
        profile.bytes(PROFILE_LOCATION, &m.0);
    }
    for m in &tables.function_msgs {
        profile.bytes(PROFILE_FUNCTION, &m.0);
    }
    let period_type = value_type(&mut strings, "space", "bytes");
    let comment_id = strings.id(comment);
    let default_type = strings.id("inuse_space");
    for s in &strings.table {
        profile.bytes(PROFILE_STRING_TABLE, s.as_bytes());
    }
    profile.bytes(PROFILE_PERIOD_TYPE, &period_type);
    profile.uint(PROFILE_PERIOD, 1);
    profile.packed(PROFILE_COMMENT, &[comment_id]);
    profile.uint(PROFILE_DEFAULT_SAMPLE_TYPE, default_type);
    profile.0
}

/// Writes a profile gzipped, as pprof tools expect `.pb.gz` files.
pub fn write_gz(path: &std::path::Path, profile: &[u8]) -> std::io::Result<()> {
    let file = std::fs::File::create(path)?;
    let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    gz.write_all(profile)?;
    gz.finish()?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str, line: u32, inlined: bool) -> FrameReport {
        FrameReport {
            function: name.into(),
            file: Some("src/lib.rs".into()),
            line: Some(line),
            inlined,
        }
    }

    #[test]
    fn varints_and_fields_follow_the_wire_format() {
        let mut m = Message::default();
        m.varint(300);
        assert_eq!(m.0, [0xac, 0x02]);
        let mut m = Message::default();
        m.uint(1, 150);
        assert_eq!(m.0, [0x08, 0x96, 0x01]);
        let mut m = Message::default();
        m.bytes(2, b"testing");
        assert_eq!(m.0, [0x12, 0x07, b't', b'e', b's', b't', b'i', b'n', b'g']);
        let mut m = Message::default();
        m.packed(4, &[3, 270, 86942]);
        assert_eq!(m.0, [0x22, 0x06, 0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05]);
    }

    #[test]
    fn inlined_frames_share_a_location_and_repeated_ones_are_reused() {
        let a = [
            frame("inner", 3, true),
            frame("outer", 10, false),
            frame("test", 20, false),
        ];
        let b = [frame("outer", 11, false), frame("test", 20, false)];
        let samples = [
            Sample {
                frames: &a,
                objects: 1,
                bytes: 64,
            },
            Sample {
                frames: &b,
                objects: 2,
                bytes: 32,
            },
        ];
        let bytes = encode(&samples, "p", "leaked");
        let p = <decoded::Profile as prost::Message>::decode(bytes.as_slice()).unwrap();
        let name = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(p.string_table[0], "");
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (name(t.r#type), name(t.unit)))
            .collect();
        assert_eq!(
            types,
            [("inuse_objects", "count"), ("inuse_space", "bytes")]
        );
        assert_eq!(name(p.default_sample_type), "inuse_space");
        // Three locations: {inner:3 inlined into outer:10}, {test:20}, {outer:11}.
        assert_eq!(p.location.len(), 3);
        let lines = |id: u64| -> Vec<(String, i64)> {
            let loc = p.location.iter().find(|l| l.id == id).unwrap();
            loc.line
                .iter()
                .map(|l| {
                    let f = p.function.iter().find(|f| f.id == l.function_id).unwrap();
                    (name(f.name).to_string(), l.line)
                })
                .collect()
        };
        let first: Vec<Vec<(String, i64)>> = p.sample[0]
            .location_id
            .iter()
            .map(|&id| lines(id))
            .collect();
        assert_eq!(
            first,
            [
                vec![("inner".to_string(), 3), ("outer".to_string(), 10)],
                vec![("test".to_string(), 20)]
            ]
        );
        assert_eq!(p.sample[0].value, [1, 64]);
        assert_eq!(p.sample[1].value, [2, 32]);
        // The test's own frame is one location for both samples.
        assert_eq!(p.sample[0].location_id[1], p.sample[1].location_id[1]);
        assert_eq!(p.function.len(), 3);
    }

    #[test]
    fn pprof_keeps_generic_names_whole() {
        let frames = [
            frame("alloc::slice::<impl [T]>::to_vec", 10, false),
            frame(
                "<alloc::string::String as core::convert::From<&str>>::from",
                20,
                false,
            ),
        ];
        let samples = [Sample {
            frames: &frames,
            objects: 1,
            bytes: 8,
        }];
        let bytes = encode(&samples, "p", "leaked");
        let p = <decoded::Profile as prost::Message>::decode(bytes.as_slice()).unwrap();
        for f in &p.function {
            let (name, system) = (
                &p.string_table[f.name as usize],
                &p.string_table[f.system_name as usize],
            );
            // pprof (internal/symbolizer, Demangle) leaves a function alone when its name is
            // set and differs from its system name; otherwise it demangles the system name
            // and, failing that, strips `(…)` and `<…>` from anything that looks like C++.
            assert!(!name.is_empty() && system != name, "{name:?} / {system:?}");
        }
        let names: Vec<&str> = p
            .function
            .iter()
            .map(|f| p.string_table[f.name as usize].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "alloc::slice::<impl [T]>::to_vec",
                "<alloc::string::String as core::convert::From<&str>>::from"
            ]
        );
    }

    /// The parts of google/pprof's profile.proto the tests read, for prost (shared with
    /// the end-to-end tests).
    pub mod decoded {
        include!("../../../tests/e2e/pprof_proto.rs");
    }
}
