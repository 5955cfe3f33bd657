"""Speech out (issue 35): CSM's frame loop (``csm_frames``), the codec node that turns streamed
frames into audio chunks (``codec_node``) and the offline ``Speaker`` (``speaker``)."""
