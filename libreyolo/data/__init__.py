"""Datasets, label formats, augmentation and the built-in ``shapes`` demo dataset.

Modules: :mod:`.config` (dataset yaml -> :class:`~.config.DataConfig`), :mod:`.labels`
(label files, strict parsing, label cache), :mod:`.augment` (box-consistent augmentation),
:mod:`.dataset` (:class:`~.dataset.DetectionDataset`, :func:`~.dataset.collate_detection`),
:mod:`.loader` (:func:`~.loader.build_dataloader`), :mod:`.shapes` (demo dataset generator),
:mod:`.classify` (ImageFolder classification data and transforms), :mod:`.shapes_cls` (the
``shapes-cls`` classification demo set).
Nothing is imported here, so ``import libreyolo.data`` stays cheap.
"""
