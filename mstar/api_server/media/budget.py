"""A capacity shared by the requests in flight: remote fetch slots, decoded pixels.

``take(amount)`` waits until the amount fits, first come first served (a large amount is not
passed over by smaller ones forever), and ``give(amount)`` returns it. Waiting is bounded by the
caller (cancelling ``take`` leaves nothing taken). Used from the event loop's thread; the futures
are made on the running loop at each wait, so one budget serves any loop.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Budget:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiting: deque[tuple[int, asyncio.Future]] = deque()

    async def take(self, amount: int) -> None:
        if amount > self.capacity:
            raise ValueError(f"{amount} can never fit in a budget of {self.capacity}")
        if not self._waiting and self.used + amount <= self.capacity:
            self.used += amount
            return
        granted = asyncio.get_running_loop().create_future()
        entry = (amount, granted)
        self._waiting.append(entry)
        try:
            await granted
        except BaseException:
            if granted.done() and not granted.cancelled():
                self.give(amount)  # granted as it was cancelled: hand it on
            elif entry in self._waiting:
                self._waiting.remove(entry)
                self._grant()  # a large waiter leaving may let smaller ones in
            raise

    def give(self, amount: int) -> None:
        self.used -= amount
        self._grant()

    def _grant(self) -> None:
        while self._waiting and self.used + self._waiting[0][0] <= self.capacity:
            amount, granted = self._waiting.popleft()
            if not granted.cancelled():  # its task was cancelled and has not run since
                self.used += amount
                granted.set_result(None)
