"""Search your own videos: ``prvr-videos {index,search,serve,demo}`` (:mod:`reference_models.videos.cli`).

A folder of videos becomes a gallery (:mod:`~reference_models.videos.indexing`: decoded with PyAV, encoded with an
``open_clip`` CLIP, kept by content digest so that a changed folder is updated, not indexed again), which a
sentence searches zero-shot (:mod:`~reference_models.videos.zero_shot`: the encoder's text embedding against
multi-scale windows of consecutive frames) or with a Holmes checkpoint trained on the gallery's captions
(:mod:`~reference_models.videos.trained`). Each answer has the videos, the moment in each, the query's
evidential opinion and type, and, calibrated on held-out captions, the probability that the right video is
among those shown (:mod:`~reference_models.videos.calibration`, :mod:`~reference_models.videos.answers`).
:mod:`~reference_models.videos.service` serves it with a page; :mod:`~reference_models.videos.generated` writes
a world of videos with captions that nobody has to download, and :mod:`~reference_models.videos.train_encoder`
trains the small encoder the package ships for it.
"""
