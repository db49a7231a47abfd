"""The SAM lineage (promptable segmentation): the prompt encoder and mask decoder that SAM and
MobileSAM share, the network wrapper, the seam, the loss and the checkpoint converters."""
