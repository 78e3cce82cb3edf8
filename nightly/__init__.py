"""The nightly runs without Prefect: dated windows (``window``), the data gate (``datacheck``) and their configs
(``config``). The flows in ``flows/`` call these; the models they compete for are ``models``'."""
