//! A document tree whose nodes know their parent.

use std::cell::RefCell;
use std::rc::Rc;

/// One node of the tree.
pub struct Node {
    name: String,
    /// Bug: a strong reference back to the parent. Parent and child then keep each other
    /// alive forever; it should be a `std::rc::Weak<Node>`.
    parent: RefCell<Option<Rc<Node>>>,
    children: RefCell<Vec<Rc<Node>>>,
}

impl Node {
    /// A new node without parent or children.
    pub fn new(name: &str) -> Rc<Node> {
        let node = Node {
            name: name.to_owned(),
            parent: RefCell::new(None),
            children: RefCell::new(Vec::new()),
        };
        Rc::new(node) // leak-site: paths_follow_parent_links
    }

    /// Makes `child` a child of `parent`.
    pub fn add_child(parent: &Rc<Node>, child: Rc<Node>) {
        *child.parent.borrow_mut() = Some(Rc::clone(parent));
        parent.children.borrow_mut().push(child);
    }

    /// The node's path from the root, e.g. `/docs/guide/intro`.
    pub fn path(&self) -> String {
        match &*self.parent.borrow() {
            Some(parent) => format!("{}/{}", parent.path(), self.name),
            None => format!("/{}", self.name),
        }
    }

    /// Number of direct children.
    pub fn child_count(&self) -> usize {
        self.children.borrow().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LEAK: every parent/child pair is an `Rc` cycle, so when the test drops its handles
    /// the whole tree (three nodes, their names and child lists) stays allocated and
    /// unreachable.
    #[test]
    fn paths_follow_parent_links() {
        let docs = Node::new("docs");
        let guide = Node::new("guide");
        let intro = Node::new("intro");
        Node::add_child(&docs, Rc::clone(&guide));
        Node::add_child(&guide, Rc::clone(&intro));
        assert_eq!(intro.path(), "/docs/guide/intro");
        assert_eq!(docs.child_count(), 1);
    }

    /// CLEAN: a node without parent or children has no cycle and is freed when dropped.
    #[test]
    fn lone_node_is_its_own_root() {
        let readme = Node::new("readme");
        assert_eq!(readme.path(), "/readme");
        assert_eq!(readme.child_count(), 0);
    }
}
