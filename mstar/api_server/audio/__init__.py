"""POST /v1/audio/transcriptions and /v1/audio/translations in OpenAI's shapes: the multipart form
(``form``), the served speech model (``speech``), the 30 s windows run through the engine
(``windows``), the response formats (``formats``) and the routes with their stream (``routes``)."""
