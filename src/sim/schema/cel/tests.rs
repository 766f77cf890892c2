//! Unit tests of `cel`.

use super::*;

fn eval(expr: &str) -> Result<cel::Value, ExecutionError> {
    let program = ENV.compile(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
    program.execute(&Context::with_env(Arc::clone(&ENV)))
}

fn assert_true(expr: &str) {
    assert_eq!(eval(expr), Ok(cel::Value::Bool(true)), "{expr}");
}

#[test]
fn string_extension_functions_are_available() {
    assert_true("'15.4'.split('.')[0] == '15'");
    assert_true("'15.4'.split('.') == ['15', '4']");
    assert_true("'AbC'.lowerAscii() == 'abc' && 'AbC'.upperAscii() == 'ABC'");
    assert_true("'  x '.trim() == 'x'");
    assert_true("'hello'.indexOf('l') == 2");
    assert_true("'a-b-c'.replace('-', '.') == 'a.b.c'");
    assert_true("['a', 'b'].join('/') == 'a/b'");
    assert_true("'abc'.matches('^a.c$') && size('abc') == 3");
    assert_true("[1, 2, 3].all(x, x > 0) && [1, 2].exists(x, x == 2)");
}

#[test]
fn regex_library_finds_matches() {
    assert_true("'abc 123 de 45'.find('[0-9]+') == '123'");
    assert_true("'abc'.find('[0-9]+') == ''");
    assert_true("'abc 123 de 45'.findAll('[0-9]+') == ['123', '45']");
    assert_true("'a1b2c3'.findAll('[0-9]', 2) == ['1', '2']");
    assert!(eval("'a'.find('(')").is_err());
}

#[test]
fn matches_reads_perl_classes_as_go_does() {
    assert_true("'0 3'.matches('^\\\\S+\\\\s\\\\S+$') && matches('abc', 'b')");
    assert_true("!'0\\u00a03'.matches('^\\\\S+\\\\s\\\\S+$')");
    assert!(eval("'a'.matches('(')").is_err());
}

#[test]
fn lists_library_orders_adds_and_finds() {
    assert_true("[1, 2, 2, 3].isSorted() && !['b', 'a'].isSorted() && [].isSorted()");
    assert_true("[1.5, 2.0].isSorted() && [duration('1s'), duration('2s')].isSorted()");
    assert_true("[1, 2, 3].sum() == 6 && [0.5, 1.0].sum() == 1.5 && [].sum() == 0");
    assert_true("[1u, 2u].sum() == 3u && [duration('1s'), duration('1m')].sum() == duration('61s')");
    assert_true("[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3");
    assert_true("['b', 'c', 'a'].min() == 'a' && [1.5, -2.5].max() == 1.5");
    assert_true("['a', 'b', 'b'].indexOf('b') == 1 && ['a', 'b', 'b'].lastIndexOf('b') == 2");
    assert_true("[1, 2].indexOf(3) == -1 && [1, 2].lastIndexOf(3) == -1 && [1, 2].indexOf(2.0) == 1");
    assert_true("'hello'.indexOf('l') == 2 && 'hello'.lastIndexOf('l') == 3");
    let error = eval("[].min()").unwrap_err();
    assert_eq!(describe_runtime_error(&error), "min called on empty list");
    assert_eq!(describe_runtime_error(&eval("[].max()").unwrap_err()), "max called on empty list");
    assert!(eval("[1, 'a'].isSorted()").is_err());
    assert!(eval("[9223372036854775807, 1].sum()").is_err());
}

#[test]
fn sets_extension_compares_as_sets() {
    assert_true("sets.contains([1, 2, 3], [3, 1]) && sets.contains([1], []) && !sets.contains([1], [2])");
    assert_true("sets.contains([1.0], [1])");
    assert_true("sets.equivalent(['a', 'b', 'a'], ['b', 'a']) && !sets.equivalent(['a'], ['a', 'b'])");
    assert_true("sets.intersects([1, 2], [2, 3]) && !sets.intersects([1], [2]) && !sets.intersects([], [1])");
}

#[test]
fn url_library_answers_as_net_url() {
    assert_true("isURL('https://example.com:80/') && isURL('/absolute-path') && !isURL('../relative-path')");
    assert_true("url('https://example.com:80/').getScheme() == 'https'");
    assert_true("url('https://example.com:80/').getHost() == 'example.com:80'");
    assert_true(
        "url('http://[::1]:80/').getHost() == '[::1]:80' && url('http://[::1]:80/').getHostname() == '::1'",
    );
    assert_true(
        "url('https://example.com:80/').getPort() == '80' && url('https://example.com/').getPort() == ''",
    );
    assert_true("url('https://example.com/path with spaces/').getEscapedPath() == '/path%20with%20spaces/'");
    assert_true(
        "url('https://example.com/path?k1=a&k2=b&k2=c').getQuery() == {'k1': ['a'], 'k2': ['b', 'c']}",
    );
    assert_true("url('https://example.com/p#frag').getEscapedPath() == '/p' && url('/p') == url('/p')");
    let error = eval("url('../relative')").unwrap_err();
    assert_eq!(
        describe_runtime_error(&error),
        r#"URL parse error during conversion from string: parse "../relative": invalid URI for request"#
    );
}

#[test]
fn strings_extension_of_1_28_is_evaluated() {
    assert_true("'abc'.charAt(1) == 'b' && 'abc'.charAt(3) == ''");
    assert_true("'aba'.lastIndexOf('a') == 2 && 'abcabc'.indexOf('c', 3) == 5");
    assert_true("'abcd'.substring(1, 3) == 'bc' && 'abcd'.substring(2) == 'cd'");
    assert_true("'a,b,c'.split(',', 2) == ['a', 'b,c'] && 'aaa'.replace('a', 'b', 2) == 'bba'");
    assert_true("['a', 'b'].join() == 'ab'");
    assert!(eval("'abc'.charAt(4)").is_err());
}

#[test]
fn quantity_library_compares_exactly() {
    assert_true("quantity('1Gi').compareTo(quantity('1024Mi')) == 0");
    assert_true("quantity('10Gi').compareTo(quantity('5Gi')) == 1");
    assert_true("quantity('5Gi').compareTo(quantity('10Gi')) == -1");
    assert_true("quantity('1G').isLessThan(quantity('1Gi'))");
    assert_true("quantity('2').isGreaterThan(quantity('1999m'))");
    assert_true("quantity('1Ki').asInteger() == 1024");
    assert_true("quantity('1.5').isInteger() == false");
    assert_true("quantity('1500m').asApproximateFloat() == 1.5");
    assert_true("quantity('-1').sign() == -1 && quantity('0').sign() == 0");
    assert_true("quantity('1Gi').add(quantity('1Gi')) == quantity('2Gi')");
    assert_true("quantity('1').add(2) == quantity('3')");
    assert_true("quantity('1').sub(quantity('500m')) == quantity('0.5')");
    assert_true("quantity('3').sub(1) == quantity('2')");
    assert_true("isQuantity('1e3') && !isQuantity('1GB')");
}

#[test]
fn quantity_errors_are_runtime_errors() {
    let error = eval("quantity('ten')").unwrap_err();
    assert!(describe_runtime_error(&error).starts_with("quantities must match"), "{error}");
    assert!(eval("quantity('1.5').asInteger()").is_err());
}

#[test]
fn numbers_convert_as_the_schema_types_them() {
    let int_node = SchemaNode::compile(&serde_json::json!({"type": "integer"}), "s", true).unwrap();
    let num_node = SchemaNode::compile(&serde_json::json!({"type": "number"}), "s", true).unwrap();
    assert_eq!(to_cel(Some(&int_node), &serde_json::json!(3)), cel::Value::Int(3));
    assert_eq!(to_cel(Some(&num_node), &serde_json::json!(3)), cel::Value::Float(3.0));
    assert_eq!(to_cel(None, &serde_json::json!(3)), cel::Value::Int(3));
}
