//! Regular expressions read as Go's RE2 reads them, which is how the apiserver reads a CRD's
//! `pattern` and the CEL regex functions: its Perl classes are ASCII (`\s` is `[\t\n\f\r ]`,
//! `\d` is `[0-9]`, `\w` is `[0-9A-Za-z_]`), where the `regex` crate's are Unicode (its `\s`
//! matches a no-break space). Everything else both engines read alike for the patterns CRDs use.

use regex::Regex;

/// The ASCII class that Go's RE2 means by the Perl class `\<letter>`, as a (nestable) class.
fn ascii_class(letter: char) -> Option<&'static str> {
    Some(match letter {
        's' => r"[\t\n\f\r ]",
        'S' => r"[^\t\n\f\r ]",
        'd' => "[0-9]",
        'D' => "[^0-9]",
        'w' => "[0-9A-Za-z_]",
        'W' => "[^0-9A-Za-z_]",
        _ => return None,
    })
}

/// Compiles `pattern` with Go's meaning of `\s`, `\d`, `\w` and their negations.
pub(crate) fn compile(pattern: &str) -> Result<Regex, regex::Error> {
    let mut translated = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            translated.push(c);
            continue;
        }
        match chars.next() {
            Some(letter) => match ascii_class(letter) {
                Some(class) => translated.push_str(class),
                None => {
                    translated.push('\\');
                    translated.push(letter);
                }
            },
            None => translated.push('\\'),
        }
    }
    Regex::new(&translated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perl_classes_are_ascii_as_in_go() {
        let spaced = compile(r"^\S+\s+\S+$").unwrap();
        assert!(spaced.is_match("0 3"));
        assert!(!spaced.is_match("0\u{a0}3"), "a no-break space is not \\s in Go");
        assert!(compile(r"^\d+$").unwrap().is_match("42"));
        assert!(!compile(r"^\d+$").unwrap().is_match("٤٢"), "Arabic-Indic digits are not \\d in Go");
        assert!(compile(r"^[\w.-]+$").unwrap().is_match("a_b.c-d"));
        assert!(!compile(r"^[\w]+$").unwrap().is_match("é"));
        assert!(compile(r"^\\s$").unwrap().is_match(r"\s"), "an escaped backslash stays one");
        assert!(compile(r"^\.$").unwrap().is_match("."));
    }
}
