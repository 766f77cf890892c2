//! Kubernetes' lists library (`k8s.io/apiserver/pkg/cel/library/lists.go`: `isSorted`, `sum`, `min`,
//! `max`, `indexOf`, `lastIndexOf` on any list) and cel-go's sets extension (`sets.contains`,
//! `sets.equivalent`, `sets.intersects`), for the `cel` crate. Elements are compared and added with
//! CEL's own operators, so these work on lists of ints, uints, doubles, strings, durations, ...

use std::cmp::Ordering;

use cel::common::types::{CelBool, CelInt, DYN_TYPE, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

/// The elements of a `list` argument.
fn elements<'b, 'v>(list: &'b (dyn Val + 'v)) -> Result<Vec<&'b (dyn Val + 'v)>, ExecutionError> {
    let iterable = list.as_iterable().ok_or_else(|| ExecutionError::UnexpectedType {
        got: list.get_type().name().to_owned(),
        want: "list".to_owned(),
    })?;
    let mut items = iterable.iter();
    let mut elements = Vec::new();
    while let Some(item) = items.next() {
        elements.push(item);
    }
    Ok(elements)
}

/// The receiver (and the other arguments) of an overload registered with `N` values.
fn take<'b, 'v, const N: usize>(args: Vec<CowVal<'b, 'v>>) -> Result<[CowVal<'b, 'v>; N], ExecutionError> {
    args.try_into().map_err(|args: Vec<_>| ExecutionError::invalid_argument_count(N, args.len()))
}

/// How `a` orders against `b`, failing as cel-go does for values that have no order.
fn compare(function: &str, a: &dyn Val, b: &dyn Val) -> Result<Ordering, ExecutionError> {
    let no_order = || ExecutionError::function_error(function, "no such overload");
    a.as_comparer().ok_or_else(no_order)?.compare(b).map_err(|_| no_order())
}

/// `list.isSorted()`: whether no element is greater than the one after it.
fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = take(args)?;
    let items = elements(list.as_ref())?;
    for pair in items.windows(2) {
        if compare("isSorted", pair[0], pair[1])? == Ordering::Greater {
            return Ok(CowVal::owned(CelBool::from(false)));
        }
    }
    Ok(CowVal::owned(CelBool::from(true)))
}

/// `list.sum()`: the elements added with `+`; `0` for an empty list (the apiserver's zero of the
/// element type, which the simulator's untyped lists do not carry).
fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = take(args)?;
    let items = elements(list.as_ref())?;
    let Some((first, rest)) = items.split_first() else { return Ok(CowVal::owned(CelInt::from(0))) };
    let mut total = first.clone_as_boxed();
    for item in rest {
        let adder =
            total.as_adder().ok_or_else(|| ExecutionError::function_error("sum", "no such overload"))?;
        let next = adder.add(*item)?.into_owned().clone_as_boxed();
        total = next;
    }
    Ok(CowVal::Owned(total))
}

/// The element `wanted` picks from the list (`min`, `max`): the first of equal ones.
fn extreme<'b, 'v>(
    function: &str,
    args: Vec<CowVal<'b, 'v>>,
    wanted: Ordering,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = take(args)?;
    let items = elements(list.as_ref())?;
    let Some((first, rest)) = items.split_first() else {
        return Err(ExecutionError::function_error(function, format!("{function} called on empty list")));
    };
    let mut best = *first;
    for item in rest {
        if compare(function, *item, best)? == wanted {
            best = *item;
        }
    }
    Ok(CowVal::Owned(best.clone_as_boxed()))
}

/// `list.min()`: the least element; an error for an empty list.
fn min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme("min", args, Ordering::Less)
}

/// `list.max()`: the greatest element; an error for an empty list.
fn max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme("max", args, Ordering::Greater)
}

/// The index of the first (`last == false`) or last element equal to the argument, or -1.
fn position<'b, 'v>(args: Vec<CowVal<'b, 'v>>, last: bool) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list, wanted] = take(args)?;
    let items = elements(list.as_ref())?;
    let matches = |item: &&dyn Val| item.equals(wanted.as_ref());
    let found = if last { items.iter().rposition(matches) } else { items.iter().position(matches) };
    let index = found.and_then(|i| i64::try_from(i).ok()).unwrap_or(-1);
    Ok(CowVal::owned(CelInt::from(index)))
}

/// `list.indexOf(value)`.
fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position(args, false)
}

/// `list.lastIndexOf(value)`.
fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position(args, true)
}

/// Kubernetes' lists library, in every version's base environment.
pub(super) fn lists_library(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("isSorted", "list_is_sorted", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], max)?;
    env.add_member_overload("indexOf", "list_index_of", LIST_TYPE, vec![DYN_TYPE], index_of)?;
    env.add_member_overload("lastIndexOf", "list_last_index_of", LIST_TYPE, vec![DYN_TYPE], last_index_of)?;
    Ok(())
}

/// Whether every element of `sub` equals some element of `list` (CEL equality: `1 == 1.0`).
fn contains_all(list: &[&dyn Val], sub: &[&dyn Val]) -> bool {
    sub.iter().all(|wanted| list.iter().any(|item| item.equals(*wanted)))
}

/// The two list arguments of a sets function, and what `test` says of them.
fn sets_test<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    test: fn(&[&dyn Val], &[&dyn Val]) -> bool,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [a, b] = take(args)?;
    let (a, b) = (elements(a.as_ref())?, elements(b.as_ref())?);
    Ok(CowVal::owned(CelBool::from(test(&a, &b))))
}

/// `sets.contains(list, sub)`: every element of `sub` is in `list` (true for an empty `sub`).
fn sets_contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    sets_test(args, contains_all)
}

/// `sets.equivalent(a, b)`: each contains the other, duplicates and order aside.
fn sets_equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    sets_test(args, |a, b| contains_all(a, b) && contains_all(b, a))
}

/// `sets.intersects(a, b)`: some element is in both.
fn sets_intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    sets_test(args, |a, b| a.iter().any(|x| b.iter().any(|y| x.equals(*y))))
}

/// cel-go's sets extension, in the base environment from 1.29 (new expressions may use it from
/// 1.30, as [`crate::sim::version`] decides).
pub(super) fn sets_library(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload("sets.contains", "list_sets_contains_list", vec![LIST_TYPE, LIST_TYPE], sets_contains)?;
    env.add_overload(
        "sets.equivalent",
        "list_sets_equivalent_list",
        vec![LIST_TYPE, LIST_TYPE],
        sets_equivalent,
    )?;
    env.add_overload(
        "sets.intersects",
        "list_sets_intersects_list",
        vec![LIST_TYPE, LIST_TYPE],
        sets_intersects,
    )?;
    Ok(())
}
