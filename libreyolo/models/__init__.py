"""Built-in families. Each line registers one family; delete the line and its folder and the
family is gone."""

from ._base.registry import register_family
from .birefnet.family import BiRefNet
from .clip.family import CLIP
from .convnext.family import ConvNeXt
from .deformable_detr.family import DeformableDETR
from .deim.family import DEIM
from .deimv2.family import DEIMv2
from .deit.family import DeiT
from .depth_anything.family import DepthAnythingV2
from .depth_anything3.family import DepthAnything3
from .dfine.family import DFINE
from .dino_detr.family import DINODETR
from .dinov2.family import DINOv2
from .dinov2_reg.family import DINOv2Reg
from .dinov2_seg.family import DINOv2Seg
from .efficientnetv2.family import EfficientNetV2
from .esrgan.family import ESRGAN
from .fomo.family import FOMO
from .lw_detr.family import LWDETR
from .mobilenetv4.family import MobileNetV4
from .mobilesam.family import MobileSAM
from .nafnet.family import NAFNet
from .picodet.family import PicoDet
from .pidnet.family import PIDNet
from .ppocr.family import PPOCR
from .resnet.family import ResNet
from .rf_detr.family import RFDETR
from .rtdetr.family import RTDETR
from .rtdetrv2.family import RTDETRv2
from .rtdetrv4.family import RTDETRv4
from .rtmdet.family import RTMDet
from .rtmdet_ins.family import RTMDetIns
from .sam.family import SAM
from .segformer.family import SegFormer
from .siglip2.family import SigLIP2
from .swin.family import Swin
from .swinir.family import SwinIR
from .vit.family import ViT
from .yolo1.family import YOLO1
from .yolo2.family import YOLO2
from .yolo3.family import YOLO3
from .yolo4.family import YOLO4
from .yolo7.family import YOLO7
from .yolo9.family import YOLO9
from .yolo9_e2e.family import YOLO9E2E
from .yolo9_p2.family import YOLO9P2
from .yolo9_pose.family import YOLO9Pose
from .yolo9_seg.family import YOLO9Seg
from .yolonas.family import YOLONAS
from .yolonas_pose.family import YOLONASPose
from .yolox.family import YOLOX

register_family(YOLO9)
register_family(YOLO9P2)
register_family(YOLO9E2E)
register_family(YOLOX)
register_family(YOLO7)
register_family(RTMDet)
register_family(PicoDet)
register_family(RTDETR)
register_family(RTDETRv2)
register_family(DFINE)
register_family(DEIM)
register_family(DEIMv2)
register_family(RTDETRv4)
register_family(ResNet)
register_family(ConvNeXt)
register_family(MobileNetV4)
register_family(EfficientNetV2)
register_family(ViT)
register_family(DeiT)
register_family(Swin)
register_family(SegFormer)
register_family(PIDNet)
register_family(DINOv2Seg)
register_family(DINOv2)
register_family(DINOv2Reg)
register_family(CLIP)
register_family(SigLIP2)
register_family(DepthAnythingV2)
register_family(DepthAnything3)
register_family(FOMO)
register_family(NAFNet)
register_family(ESRGAN)
register_family(YOLO9Seg)
register_family(YOLONAS)
register_family(SwinIR)
register_family(YOLO9Pose)
register_family(DeformableDETR)
register_family(RTMDetIns)
register_family(YOLONASPose)
register_family(DINODETR)
register_family(LWDETR)
register_family(RFDETR)
register_family(SAM)
register_family(MobileSAM)
register_family(YOLO3)
register_family(YOLO4)
register_family(YOLO2)
register_family(YOLO1)
register_family(BiRefNet)
register_family(PPOCR)
