"""roseood's reference zoo, installed (``pip install ./zoo``): each model's folder with its card
(``NAME/README.md``) and ``SHA256SUMS``, found by ``roseood.models.zoo.zoo_dir`` without importing this."""
