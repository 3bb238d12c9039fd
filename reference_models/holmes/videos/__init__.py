"""From a folder of your own videos to a Holmes search: ``extract`` (PyAV + ``open_clip``), a generated test
collection, and ``search`` (top videos, best moments, the query's opinion, answer or rephrase)."""
