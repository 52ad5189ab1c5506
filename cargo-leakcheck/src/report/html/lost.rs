//! A leaked stack's lost objects on the page: how they are lost, and a reference cycle drawn
//! as boxes and arrows (no script, no external assets).

use crate::model::Unreachable;
use crate::report::markup::escape as esc;
use std::fmt::Write;
use std::path::Path;

/// How a leaked stack's objects are lost, in words; a reference cycle drawn as its members
/// in boxes, each arrow labelled with where in its object the pointer is, the last (the
/// one to make `Weak`) back to the first.
pub(super) fn block(h: &mut String, lost: &Unreachable, root: &Path) {
    let text =
        crate::report::text::unreachable_line(lost, |f| crate::report::text::place_text(f, root));
    let _ = write!(h, "<div class=\"lost\"><div>{}</div>", esc(&text));
    if let Unreachable::Cycle(c) = lost {
        h.push_str("<div class=\"cycle\">");
        let link = |f: &crate::model::FrameReport| {
            let place = crate::report::text::place_text(f, root);
            match super::source_link(f, root) {
                Some(href) => format!(
                    "<a href=\"{}\"><code>{}</code></a>",
                    esc(&href),
                    esc(&place)
                ),
                None => format!("<code>{}</code>", esc(&place)),
            }
        };
        for (i, m) in c.members.iter().enumerate() {
            let site = match &m.called_at {
                Some(via) => format!("{} via {}", link(&m.site), link(via)),
                None => link(&m.site),
            };
            let counts = match (m.strong, m.weak) {
                (Some(s), Some(w)) => format!(" · strong {s}, weak {w}"),
                _ => String::new(),
            };
            let _ = write!(
                h,
                "<span class=\"node\"><b>{}</b><br>{site}<br><small>{} B{counts}</small></span>",
                code_spans(&crate::report::text::member_what(m)),
                m.size
            );
            let last = i + 1 == c.members.len();
            let (class, arrow) = match last {
                true => (
                    " weak",
                    "↩ back to the first: make this one <code>Weak</code>",
                ),
                false => ("", "→"),
            };
            let _ = write!(
                h,
                "<span class=\"edge{class}\">{arrow}<br><small>at +{}</small></span>",
                m.offset
            );
        }
        h.push_str("</div>");
    }
    h.push_str("</div>");
}

/// `text` escaped, its `quoted` parts as code.
fn code_spans(text: &str) -> String {
    esc(text)
        .split('`')
        .enumerate()
        .map(|(i, part)| match i % 2 {
            1 => format!("<code>{part}</code>"),
            _ => part.to_owned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn quoted_parts_are_code_and_the_rest_is_escaped() {
        assert_eq!(
            super::code_spans("a `Vec`'s <buffer>"),
            "a <code>Vec</code>&apos;s &lt;buffer&gt;"
        );
    }
}
