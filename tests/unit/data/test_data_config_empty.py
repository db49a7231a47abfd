"""An empty ``data=`` is one clear error in the Python API, worded as the CLI words it."""

from __future__ import annotations

import pytest

from libreyolo.data.config import load_data_config
from libreyolo.errors import ConfigError, empty_value


@pytest.mark.parametrize("data", ["", "  "])
def test_empty_data_is_the_shared_error(data):
    with pytest.raises(ConfigError) as e:
        load_data_config(data)
    assert str(e.value) == str(empty_value("data"))
