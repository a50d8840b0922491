"""The folder of the gates the package ships: what lies in it, refused as a save's
target, and the one block that may write there (the refit that makes them)."""

from __future__ import annotations

import pytest

from adaptive_gates.bundled.shipped import PRETRAINED, pretrained_path
from adaptive_gates.errors import AdaptiveGatesError, ShippedGateError
from adaptive_gates.persistence.shipped_folder import (
    SHIPPED_ROOT,
    check_not_shipped,
    is_shipped,
    writing_shipped_gates,
)


def test_the_shipped_folder_is_where_the_shipped_gates_are():
    assert all(pretrained_path(name).parent.resolve() == SHIPPED_ROOT for name in PRETRAINED)
    for inside in [
        SHIPPED_ROOT,
        pretrained_path("stacked"),
        SHIPPED_ROOT / "new" / "deeper",
        SHIPPED_ROOT / "x" / "..",
    ]:
        assert is_shipped(inside), inside
    for outside in [SHIPPED_ROOT.parent, SHIPPED_ROOT.parent / "pretrained-copy", SHIPPED_ROOT / ".." / "data"]:
        assert not is_shipped(outside), outside


def test_a_path_there_is_refused_naming_it_and_the_folder(tmp_path):
    target = pretrained_path("draft-check")
    with pytest.raises(ShippedGateError) as refused:
        check_not_shipped(target)
    assert str(target) in str(refused.value) and str(SHIPPED_ROOT) in str(refused.value)
    assert isinstance(refused.value, AdaptiveGatesError) and isinstance(refused.value, ValueError)
    (tmp_path / "into-the-package").symlink_to(SHIPPED_ROOT)
    with pytest.raises(ShippedGateError):
        check_not_shipped(tmp_path / "into-the-package" / "stacked")
    check_not_shipped(tmp_path / "gate")  # anywhere else


def test_only_the_refit_block_may_write_there():
    with writing_shipped_gates():
        check_not_shipped(pretrained_path("stacked"))
    with pytest.raises(ShippedGateError):
        check_not_shipped(pretrained_path("stacked"))  # the block is over
