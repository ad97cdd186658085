"""Builders the tests share: configs, tiny models, fakes of the backends and servers."""
