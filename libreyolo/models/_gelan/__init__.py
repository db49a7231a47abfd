"""Code the YOLOv9 (GELAN) lineage shares: ``yolo9``, ``yolo9_p2`` (a stride-4 output level) and
``yolo9_e2e`` (a one-to-one head without NMS). Blocks (:mod:`.elan`), the size table
(:mod:`.variants`), the network with its head (:mod:`.net`), the task-aligned loss (:mod:`.loss`),
the dense postprocess and captured decode (:mod:`.postprocess`), the reference key layouts
(:mod:`.convert`) and the family base (:mod:`.family`)."""
