"""Built-in families. Each line registers one family; delete the line and its folder and the
family is gone."""

from ..registry import register_family
from .rtdetr.family import RTDETR
from .rtdetrv2.family import RTDETRv2
from .rtmdet.family import RTMDet
from .yolo7.family import YOLO7
from .yolo9.family import YOLO9
from .yolox.family import YOLOX

register_family(YOLO9)
register_family(YOLOX)
register_family(YOLO7)
register_family(RTMDet)
register_family(RTDETR)
register_family(RTDETRv2)
