"""Code the RTMDet lineage shares: ``rtmdet`` (detection) and ``rtmdet_ins`` (instance
segmentation). Blocks (:mod:`.cspnext`), the size table (:mod:`.variants`), the backbone, neck and
detection head (:mod:`.net`), the dynamic soft-label assigner with its QFL / GIoU loss
(:mod:`.loss`) and the dense postprocess with its captured decode (:mod:`.postprocess`)."""
