from pricing import order_total


def test_small_order_pays_full_price() -> None:
    assert order_total([(250, 2), (100, 3)]) == 800


def test_nine_items_get_no_discount() -> None:
    assert order_total([(100, 9)]) == 900


def test_ten_items_get_the_bulk_discount() -> None:
    assert order_total([(100, 10)]) == 900


def test_large_order_gets_the_bulk_discount() -> None:
    assert order_total([(200, 12), (50, 4)]) == 2340
