"""Image sets for OOD benchmarks: named sets, ``.npz`` files and image folders, preprocessed as the paper."""

from roseood.data.loading import ImageSet, ImageStream, load_images, open_images, take
from roseood.data.registry import DATASETS, DatasetSpec, dataset_spec, list_datasets, resolve_data_dir

__all__ = [
    "DATASETS",
    "DatasetSpec",
    "ImageSet",
    "ImageStream",
    "dataset_spec",
    "list_datasets",
    "load_images",
    "open_images",
    "resolve_data_dir",
    "take",
]
