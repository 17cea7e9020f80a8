"""tests/case_table.py: a table checked inside one test still checks every case and names each failing one."""

from __future__ import annotations

import pytest

from tests.case_table import check_every, check_every_sync


async def test_every_case_is_checked_and_every_failing_one_is_named_with_its_message() -> None:
    checked: list[int] = []

    async def check(n: int) -> None:
        checked.append(n)
        assert n % 2 == 1, f"{n} is even"
        if n == 3:
            with pytest.raises(ValueError):  # does not raise: pytest's Failed, a BaseException, is caught too
                pass

    with pytest.raises(AssertionError) as failed:
        await check_every([1, 2, 3, 4, 5], check, lambda n: f"case {n}")
    assert checked == [1, 2, 3, 4, 5]
    message = str(failed.value)
    assert message.startswith("3 of 5 cases failed:")
    assert "- case 2: AssertionError: 2 is even" in message and "- case 4: AssertionError: 4 is even" in message
    assert "- case 3: Failed: DID NOT RAISE" in message
    assert "case 1" not in message and "case 5" not in message


async def test_a_table_whose_cases_all_pass_passes() -> None:
    async def check(n: int) -> None:
        assert n > 0

    await check_every(range(1, 100), check, str)


def test_the_plain_variant_and_an_empty_table() -> None:
    def check(n: int) -> None:
        assert n != 2

    check_every_sync([1, 3], check, str)
    with pytest.raises(AssertionError, match=r"^1 of 3 cases failed:\n- 2: AssertionError"):
        check_every_sync([1, 2, 3], check, str)
    with pytest.raises(AssertionError, match="no cases"):
        check_every_sync([], check, str)


def test_a_long_message_is_cut_to_its_first_lines() -> None:
    def check(n: int) -> None:
        raise AssertionError("\n".join(f"line {i}" for i in range(50)))

    with pytest.raises(AssertionError) as failed:
        check_every_sync([7], check, str)
    assert "line 11" in str(failed.value) and "line 12" not in str(failed.value)
    assert "(38 more lines)" in str(failed.value)
