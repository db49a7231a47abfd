"""Unknown keyword arguments of the Python API: ConfigError with a suggestion, never a bare TypeError."""

from __future__ import annotations

import inspect

import pytest

from libreyolo.errors import ConfigError, keyword_checked


class _Model:
    @keyword_checked("predict")
    def predict(self, source=None, *, conf: float = 0.25, imgsz: int | None = None, stream: bool = False):
        """Docstring kept."""
        return source, conf, imgsz

    __call__ = predict


@pytest.mark.parametrize(("typed", "meant"), [("confidence", "conf"), ("img_size", "imgsz"), ("imgsize", "imgsz"),
                                              ("conff", "conf"), ("strem", "stream")])
def test_unknown_keyword_is_a_config_error_with_a_suggestion(typed: str, meant: str) -> None:
    m = _Model()
    for call in (m.predict, m):
        with pytest.raises(ConfigError, match=f"unknown predict argument '{typed}'. Did you mean '{meant}'?"):
            call("a.jpg", **{typed: 1})
    with pytest.raises(ConfigError) as e:
        m.predict(nonsense=1)
    assert "Did you mean" not in str(e.value) and "Valid arguments: conf, imgsz, source, stream." in str(e.value)
    assert "self" not in str(e.value)


def test_known_keywords_pass_and_the_signature_stays_explicit() -> None:
    m = _Model()
    assert m.predict("a.jpg", conf=0.5) == ("a.jpg", 0.5, None)
    assert m(source="b.jpg", imgsz=320) == ("b.jpg", 0.25, 320)
    assert list(inspect.signature(_Model.predict).parameters) == ["self", "source", "conf", "imgsz", "stream"]
    assert _Model.predict.__doc__ == "Docstring kept."
    with pytest.raises(TypeError):  # positional misuse is still Python's business
        m.predict("a", "b")


def test_a_kwargs_catch_all_cannot_be_checked() -> None:
    with pytest.raises(TypeError, match="takes \\*\\*kwargs"):
        keyword_checked("x")(lambda **kw: kw)


def test_family_predict_unknown_keyword_is_a_config_error() -> None:
    from libreyolo import SAMPLE_IMAGE, LibreYOLO

    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=2)
    with pytest.raises(ConfigError, match="unknown predict argument 'confidence'. Did you mean 'conf'?"):
        model.predict(SAMPLE_IMAGE, confidence=0.3)
