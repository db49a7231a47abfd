"""Datasets, label formats, augmentation and the built-in ``shapes`` demo dataset.

Modules: :mod:`.config` (dataset yaml -> :class:`~.config.DataConfig`), :mod:`.labels`
(label files, strict parsing, label cache), :mod:`.augment` (box-consistent augmentation),
:mod:`.dataset` (:class:`~.dataset.DetectionDataset`, :func:`~.dataset.collate_detection`),
:mod:`.loader` (:func:`~.loader.build_dataloader`), :mod:`.shapes` (demo dataset generator).
Nothing is imported here, so ``import libreyolo.data`` stays cheap.
"""
