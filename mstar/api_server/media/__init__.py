"""Images of a chat request: where their bytes come from (``sources``), their checks and decoding
(``decode``), the parts of a request (``parts``) and the bounded pool the work runs in (``pool``);
audio in (``audio_decode``) and speech out in the API's formats (``sound_formats``)."""
