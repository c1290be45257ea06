"""Process groups and collectives: the rank layout, dealing generate calls to ranks and gathering
their results in call order, FSDP2 sharding (`collectives.py`); used by train/ and eval/ alike."""
