import pytest
from shopcart import Cart


@pytest.fixture
def cart():
    c = Cart()
    c.add("apple", 120, 3)
    c.add("pear", 250)
    return c


def test_subtotal(cart):
    assert cart.subtotal == 610


def test_adding_same_sku_merges_lines(cart):
    cart.add("apple", 120, 2)
    assert cart.lines["apple"].quantity == 5


def test_best_code_wins(cart):
    cart.enter_code("welcome10")
    cart.enter_code("SPRING25")
    assert cart.total == 458


def test_unknown_code_is_refused(cart):
    with pytest.raises(KeyError, match="unknown discount code"):
        cart.enter_code("FREE")


def test_remove_line(cart):
    cart.remove("pear")
    assert list(cart.lines) == ["apple"]


@pytest.mark.xfail(reason="codes stack in a later release", strict=True)
def test_codes_stack(cart):
    cart.enter_code("WELCOME10")
    cart.enter_code("SPRING25")
    assert cart.total == 412
