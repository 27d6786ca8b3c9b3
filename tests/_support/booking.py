"""A booking-style domain for tests: restaurants to book, bookings to change or cancel."""

from boundctx.understanding import Catalog, Record

CATALOG = {
    "name": "bookings",
    "workflows": [{"name": "dining", "description": "tables at restaurants",
                   "operations": ["book_table", "cancel_booking", "change_time", "list_bookings"]}],
    "operations": [
        {"name": "book_table", "description": "Reserve a table at a restaurant", "record_kind": "restaurant",
         "workflow": "dining", "guidance": "The party size counts the user.",
         "params": [{"name": "time", "type": "string", "description": "when, as the user said it"},
                    {"name": "party_size", "type": "integer", "description": "how many people"},
                    {"name": "note", "type": "string", "description": "a wish for the restaurant",
                     "required": False}]},
        {"name": "cancel_booking", "description": "Cancel one of the user's bookings", "record_kind": "booking",
         "workflow": "dining"},
        {"name": "change_time", "description": "Move one of the user's bookings to another time",
         "record_kind": "booking", "workflow": "dining",
         "params": [{"name": "time", "type": "string", "description": "the new time"}]},
        {"name": "list_bookings", "description": "Show the user's bookings", "workflow": "dining"},
    ],
}

RECORDS = [
    Record("luigis", "restaurant", {"cuisine": "italian"}, "Luigi's"),
    Record("sakura", "restaurant", {"cuisine": "japanese"}, "Sakura"),
    Record("b1", "booking", {"restaurant": "Luigi's", "time": "7 pm"}, "Luigi's at 7 pm"),
    Record("b2", "booking", {"restaurant": "Sakura", "time": "8 pm"}, "Sakura at 8 pm"),
]

MESSAGE = "Book Sakura for 4 people at 7pm and cancel the Luigi's booking."

GOLD = {
    "units": ["Book Sakura for 4 people at 7pm", "cancel the Luigi's booking"],
    "route": {"Book Sakura for 4 people at 7pm": ["book_table"], "cancel the Luigi's booking": ["cancel_booking"]},
    "locate": {("Book Sakura for 4 people at 7pm", "book_table"): "sakura",
               ("cancel the Luigi's booking", "cancel_booking"): "b1"},
    "extract": {("Book Sakura for 4 people at 7pm", "book_table"): {"time": ("7pm", "7pm"),
                                                                    "party_size": ("4 people", "4")}},
}


def catalog() -> Catalog:
    return Catalog.from_dict(CATALOG, source="booking")
