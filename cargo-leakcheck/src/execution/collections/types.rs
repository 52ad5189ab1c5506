//! The types of an executable's DWARF, as far as the walk to its collections needs them:
//! structures and unions with their members' offsets, Rust enums with their variants and
//! discriminants, pointers, arrays and sizes. Each type is read once, when first asked for,
//! by its offset in `.debug_info`.

use addr2line::gimli;
use std::collections::HashMap;
use std::rc::Rc;

pub type R<'a> = gimli::EndianSlice<'a, gimli::LittleEndian>;

/// A type's offset in `.debug_info`.
pub type TypeRef = u64;

/// One member of a structure, a union or an enum's variant.
#[derive(Clone, Debug)]
pub struct TypeMember {
    pub name: String,
    pub offset: u64,
    pub ty: Option<TypeRef>,
}

/// A Rust enum's variants (`DW_TAG_variant_part`): where its discriminant is, and each
/// variant's value (`None`: the variant that has every value the others do not).
#[derive(Clone, Debug)]
pub struct Variants {
    /// The discriminant's offset and size, when the enum has one.
    pub discr: Option<(u64, u8)>,
    pub variants: Vec<(Option<u64>, TypeMember)>,
}

/// What a type is.
#[derive(Clone, Debug)]
pub enum TypeKind {
    /// A structure (a Rust enum is one with variants), or a union.
    Struct {
        members: Vec<TypeMember>,
        variants: Option<Variants>,
        union: bool,
        /// Its template type parameters, by name.
        params: Vec<(String, TypeRef)>,
    },
    /// A pointer or reference; a fat pointer is a structure.
    Pointer { target: Option<TypeRef> },
    /// An array of `count` elements.
    Array {
        element: Option<TypeRef>,
        count: u64,
    },
    /// Anything else (base types, C-like enums, functions).
    Other,
}

/// One type.
#[derive(Clone, Debug)]
pub struct Type {
    pub name: String,
    pub size: u64,
    pub align: u64,
    pub kind: TypeKind,
}

impl Type {
    /// The member named `name`.
    pub fn member(&self, name: &str) -> Option<&TypeMember> {
        match &self.kind {
            TypeKind::Struct { members, .. } => members.iter().find(|m| m.name == name),
            _ => None,
        }
    }

    /// The template parameter named `name`.
    pub fn param(&self, name: &str) -> Option<TypeRef> {
        match &self.kind {
            TypeKind::Struct { params, .. } => {
                params.iter().find(|(n, _)| n == name).map(|(_, t)| *t)
            }
            _ => None,
        }
    }

    /// Whether it is a structure with every one of these members.
    pub fn has_members(&self, names: &[&str]) -> bool {
        names.iter().all(|n| self.member(n).is_some())
    }
}

/// Each unit of an executable's DWARF, by the offset where it starts, sorted.
pub type Units<'a> = [(u64, gimli::Unit<R<'a>>)];

/// The units of an executable's DWARF and the types read from them so far.
pub struct Types<'u, 'a> {
    pub dwarf: &'a gimli::Dwarf<R<'a>>,
    pub units: &'u Units<'a>,
    cache: HashMap<TypeRef, Option<Rc<Type>>>,
}

impl<'u, 'a> Types<'u, 'a> {
    pub fn new(dwarf: &'a gimli::Dwarf<R<'a>>, units: &'u Units<'a>) -> Self {
        Types {
            dwarf,
            units,
            cache: HashMap::new(),
        }
    }

    /// The type at `at`, typedefs and qualifiers followed; None when it cannot be read.
    pub fn get(&mut self, at: TypeRef) -> Option<Rc<Type>> {
        if let Some(t) = self.cache.get(&at) {
            return t.clone();
        }
        // A cycle through typedefs reads as unreadable rather than looping.
        self.cache.insert(at, None);
        let t = self.read(at).map(Rc::new);
        self.cache.insert(at, t.clone());
        t
    }

    fn unit_of(&self, at: TypeRef) -> Option<usize> {
        let i = self.units.partition_point(|(start, _)| *start <= at);
        i.checked_sub(1)
    }

    /// A reference attribute of an entry of unit `u`, as an offset in `.debug_info`.
    pub fn reference(&self, u: usize, value: Option<gimli::AttributeValue<R<'a>>>) -> Option<u64> {
        match value? {
            gimli::AttributeValue::UnitRef(o) => Some(self.units[u].0 + o.0 as u64),
            gimli::AttributeValue::DebugInfoRef(o) => Some(o.0 as u64),
            _ => None,
        }
    }

    fn string(&self, u: usize, value: Option<gimli::AttributeValue<R<'a>>>) -> Option<String> {
        let s = self.dwarf.attr_string(&self.units[u].1, value?).ok()?;
        Some(s.to_string_lossy().into_owned())
    }

    fn read(&mut self, at: TypeRef) -> Option<Type> {
        let u = self.unit_of(at)?;
        let units = self.units;
        let offset = gimli::UnitOffset((at - units[u].0) as usize);
        let unit = &units[u].1;
        let mut tree = unit.entries_tree(Some(offset)).ok()?;
        let root = tree.root().ok()?;
        let entry = root.entry();
        let tag = entry.tag();
        let name = self
            .string(u, entry.attr_value(gimli::DW_AT_name))
            .unwrap_or_default();
        let size = entry
            .attr_value(gimli::DW_AT_byte_size)
            .and_then(|v| v.udata_value());
        let align = entry
            .attr_value(gimli::DW_AT_alignment)
            .and_then(|v| v.udata_value())
            .unwrap_or(1);
        let target = self.reference(u, entry.attr_value(gimli::DW_AT_type));
        match tag {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_atomic_type
            | gimli::DW_TAG_restrict_type => {
                drop(tree);
                self.get(target?).map(|t| (*t).clone())
            }
            gimli::DW_TAG_pointer_type
            | gimli::DW_TAG_reference_type
            | gimli::DW_TAG_rvalue_reference_type => Some(Type {
                name,
                size: size.unwrap_or(8),
                align: 8,
                kind: TypeKind::Pointer { target },
            }),
            gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type => {
                let kind = self.struct_kind(u, root, tag == gimli::DW_TAG_union_type);
                Some(Type {
                    name,
                    size: size?,
                    align,
                    kind,
                })
            }
            gimli::DW_TAG_array_type => {
                let count = array_count(root);
                drop(tree);
                let element = target;
                let element_size = element.and_then(|e| self.get(e)).map_or(0, |t| t.size);
                let count = count?;
                Some(Type {
                    name,
                    size: size.unwrap_or(element_size.saturating_mul(count)),
                    align,
                    kind: TypeKind::Array { element, count },
                })
            }
            _ => Some(Type {
                name,
                size: size.unwrap_or(0),
                align,
                kind: TypeKind::Other,
            }),
        }
    }

    /// A structure's or union's kind: its members, template type parameters and variants.
    fn struct_kind(
        &mut self,
        u: usize,
        root: gimli::EntriesTreeNode<'_, '_, R<'a>>,
        union: bool,
    ) -> TypeKind {
        let mut members = Vec::new();
        let mut params = Vec::new();
        let mut variants = None;
        let mut children = root.children();
        while let Ok(Some(child)) = children.next() {
            let e = child.entry();
            match e.tag() {
                gimli::DW_TAG_member => {
                    if let Some(m) = self.member(u, e) {
                        members.push(m);
                    }
                }
                gimli::DW_TAG_template_type_parameter => {
                    let n = self.string(u, e.attr_value(gimli::DW_AT_name));
                    let t = self.reference(u, e.attr_value(gimli::DW_AT_type));
                    if let (Some(n), Some(t)) = (n, t) {
                        params.push((n, t));
                    }
                }
                gimli::DW_TAG_variant_part => {
                    variants = self.variant_part(u, child);
                }
                _ => {}
            }
        }
        TypeKind::Struct {
            members,
            variants,
            union,
            params,
        }
    }

    fn member(&self, u: usize, e: &gimli::DebuggingInformationEntry<R<'a>>) -> Option<TypeMember> {
        let offset = match e.attr_value(gimli::DW_AT_data_member_location) {
            Some(v) => v.udata_value()?,
            None => 0,
        };
        Some(TypeMember {
            name: self
                .string(u, e.attr_value(gimli::DW_AT_name))
                .unwrap_or_default(),
            offset,
            ty: self.reference(u, e.attr_value(gimli::DW_AT_type)),
        })
    }

    /// A Rust enum's variants; None when they are described in a way not followed (a
    /// discriminant list).
    fn variant_part(
        &mut self,
        u: usize,
        node: gimli::EntriesTreeNode<'_, '_, R<'a>>,
    ) -> Option<Variants> {
        let units = self.units;
        let discr_at = self.reference(u, node.entry().attr_value(gimli::DW_AT_discr));
        let mut discr_member: Option<(u64, Option<TypeRef>)> = None;
        let mut variants = Vec::new();
        let mut children = node.children();
        while let Ok(Some(child)) = children.next() {
            let e = child.entry();
            match e.tag() {
                gimli::DW_TAG_member => {
                    let here = units[u].0 + e.offset().0 as u64;
                    if Some(here) == discr_at {
                        let m = self.member(u, e)?;
                        discr_member = Some((m.offset, m.ty));
                    }
                }
                gimli::DW_TAG_variant => {
                    if e.attr_value(gimli::DW_AT_discr_list).is_some() {
                        return None;
                    }
                    let value = e.attr_value(gimli::DW_AT_discr_value).and_then(|v| {
                        v.udata_value()
                            .or_else(|| v.sdata_value().map(|s| s as u64))
                    });
                    let mut inner = child.children();
                    while let Ok(Some(m)) = inner.next() {
                        if m.entry().tag() == gimli::DW_TAG_member {
                            if let Some(member) = self.member(u, m.entry()) {
                                variants.push((value, member));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        let discr = match discr_member {
            Some((offset, Some(ty))) => {
                let size = self.get(ty)?.size;
                matches!(size, 1 | 2 | 4 | 8).then_some((offset, size as u8))
            }
            Some((_, None)) => None,
            None if discr_at.is_some() => return None,
            None => None,
        };
        Some(Variants { discr, variants })
    }
}

/// The element count of a one-dimensional array type's entry (`root`); None for several
/// dimensions (not followed) or none.
fn array_count<R: gimli::Reader>(root: gimli::EntriesTreeNode<'_, '_, R>) -> Option<u64> {
    let mut count = None;
    let mut children = root.children();
    while let Ok(Some(child)) = children.next() {
        let e = child.entry();
        if e.tag() != gimli::DW_TAG_subrange_type {
            continue;
        }
        let c = e
            .attr_value(gimli::DW_AT_count)
            .and_then(|v| v.udata_value())
            .or_else(|| {
                e.attr_value(gimli::DW_AT_upper_bound)
                    .and_then(|v| v.udata_value())
                    .map(|u| u + 1)
            });
        // Several dimensions are not followed.
        count = if count.is_none() { c } else { None };
    }
    count
}
